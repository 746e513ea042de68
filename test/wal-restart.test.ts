import { describe, expect, it } from "vitest";
import { BUSY_PAUSE_MS, MAX_PASSES, MAX_RESTART_ATTEMPTS, startOver, type CheckpointPass, type WalCheckpoints } from "../src/store/wal-restart.mjs";

/**
 * A WAL whose checkpoints follow a script: `commitsBefore(n)` frames are
 * committed just before the n-th passive pass (each pass then copies all of
 * them), and `writerBusy(n)` says whether the n-th RESTART finds the write
 * lock taken. The real SQLite behaviour is in checkpointer.test.ts; this is
 * the policy of when to try, retry and force.
 */
class ScriptedWal implements WalCheckpoints {
  passes = 0;
  restarts = 0;
  readonly pauses: number[] = [];

  constructor(
    private log: number,
    private readonly commitsBefore: (pass: number) => number,
    private readonly writerBusy: (attempt: number) => boolean,
  ) {}

  passive(): CheckpointPass {
    this.passes++;
    this.log += this.commitsBefore(this.passes);
    return { log: this.log, checkpointed: this.log };
  }

  restart(): CheckpointPass & { busy: number } {
    this.restarts++;
    return { busy: this.writerBusy(this.restarts) ? 1 : 0, log: this.log, checkpointed: this.log };
  }

  pause(ms: number): void {
    this.pauses.push(ms);
  }
}

const SOFT = 1_000;
const HARD = 2_000;
const over = (log: number): CheckpointPass => ({ log, checkpointed: log });

describe("starting the WAL over past its limit", () => {
  it("restarts at the first moment between two commits", () => {
    const wal = new ScriptedWal(SOFT + 10, (pass) => (pass === 1 ? 3 : 0), () => false);
    expect(startOver(wal, over(SOFT + 10), HARD)).toBe(0);
    // The first pass saw 3 new frames; the second, none: the moment.
    expect(wal.passes).toBe(2);
    expect(wal.restarts).toBe(1);
  });

  it("looks again a millisecond after a restart that found a transaction under way", () => {
    // Two passes microseconds apart saw no commit while the writer was inside a transaction.
    const wal = new ScriptedWal(SOFT + 10, (pass) => (pass === 2 ? 2 : 0), (attempt) => attempt === 1);
    expect(startOver(wal, over(SOFT + 10), HARD)).toBe(0);
    expect(wal.restarts).toBe(2);
    expect(wal.pauses).toEqual([BUSY_PAUSE_MS]);
  });

  it("leaves it to the next tick after a few busy restarts, below the hard limit", () => {
    const wal = new ScriptedWal(SOFT + 10, () => 0, () => true);
    expect(startOver(wal, over(SOFT + 10), HARD)).toBe(SOFT + 10);
    expect(wal.restarts).toBe(MAX_RESTART_ATTEMPTS);
  });

  it("does not restart while every pass finds new commits, below the hard limit", () => {
    const wal = new ScriptedWal(SOFT + 10, () => 5, () => false);
    expect(startOver(wal, over(SOFT + 10), HARD)).toBe(SOFT + 10 + 5 * (MAX_PASSES - 1));
    expect(wal.restarts).toBe(0);
  });

  it("forces the restart at once past the hard limit, and as soon as the passes cross it", () => {
    const atOnce = new ScriptedWal(HARD + 1, () => 5, () => false);
    expect(startOver(atOnce, over(HARD + 1), HARD)).toBe(0);
    expect([atOnce.passes, atOnce.restarts]).toEqual([0, 1]);

    const crossing = new ScriptedWal(HARD - 6, () => 5, () => false);
    expect(startOver(crossing, over(HARD - 6), HARD)).toBe(0);
    expect([crossing.passes, crossing.restarts]).toEqual([2, 1]);
  });

  it("reports the frames left when even the forced restart is kept out", () => {
    const wal = new ScriptedWal(HARD + 1, () => 0, () => true);
    expect(startOver(wal, over(HARD + 1), HARD)).toBe(HARD + 1);
  });
});
