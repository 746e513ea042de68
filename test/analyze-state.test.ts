import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createLogger } from "../src/log.js";
import { ANALYZE_STATE_FLUSH_MS, ANALYZE_STATE_MAX_PENDING, AnalyzeStateRepository } from "../src/store/analyze-state.js";
import { openDatabase } from "../src/store/database.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-analyze-state-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const tenant = { accountId: "acc_1", environment: "test" as const };
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe("analyze state", () => {
  // Only the flush interval's timer is faked: the end of a turn (setImmediate) stays real.
  beforeEach(() => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] }));
  afterEach(() => vi.useRealTimers());

  it("commits the puts of an interval together after it, a visitor's last one only", async () => {
    const db = openDatabase(dir);
    const state = new AnalyzeStateRepository(db, createLogger(() => undefined));
    const count = () => db.prepare("SELECT count(*) AS n FROM analyze_state").get();
    state.put(tenant, "visitor:a", { score: 1 }, Date.now() + 60_000);
    state.put(tenant, "visitor:b", { score: 2 }, Date.now() + 60_000);
    await nextTurn();
    vi.advanceTimersByTime(ANALYZE_STATE_FLUSH_MS - 1);
    expect(count()).toEqual({ n: 0 });
    state.put(tenant, "visitor:a", { score: 3 }, Date.now() + 60_000);
    vi.advanceTimersByTime(1);
    expect(db.prepare("SELECT key, value FROM analyze_state ORDER BY key").all()).toEqual([
      { key: "visitor:a", value: JSON.stringify({ score: 3 }) },
      { key: "visitor:b", value: JSON.stringify({ score: 2 }) },
    ]);

    // The next put starts the next interval.
    state.put(tenant, "visitor:c", { score: 4 }, Date.now() + 60_000);
    vi.advanceTimersByTime(ANALYZE_STATE_FLUSH_MS);
    expect(count()).toEqual({ n: 3 });
    db.close();
  });

  it("commits at the end of the turn once enough puts wait, without waiting for the interval", async () => {
    const db = openDatabase(dir);
    const state = new AnalyzeStateRepository(db, createLogger(() => undefined));
    db.exec("DELETE FROM analyze_state");
    for (let i = 0; i < ANALYZE_STATE_MAX_PENDING + 5; i++) state.put(tenant, `visitor:${i}`, { score: i }, Date.now() + 60_000);
    expect(db.prepare("SELECT count(*) AS n FROM analyze_state").get()).toEqual({ n: 0 });
    await nextTurn();
    expect(db.prepare("SELECT count(*) AS n FROM analyze_state").get()).toEqual({ n: ANALYZE_STATE_MAX_PENDING + 5 });
    db.close();
  });

  it("writes what waits when flushed on shutdown, and a failing commit costs the waiting puts, not the process", () => {
    const db = openDatabase(dir);
    const lines: string[] = [];
    const state = new AnalyzeStateRepository(db, createLogger((line) => lines.push(line)));
    db.exec("DELETE FROM analyze_state");
    state.put(tenant, "visitor:d", { score: 5 }, Date.now() + 60_000);
    state.flush();
    expect(db.prepare("SELECT key FROM analyze_state").all()).toEqual([{ key: "visitor:d" }]);

    // The table is gone (as a full disk or an I/O error would fail the commit): the timed flush throws.
    db.exec("DROP TABLE analyze_state");
    state.put(tenant, "visitor:e", { score: 6 }, Date.now() + 60_000);
    vi.advanceTimersByTime(ANALYZE_STATE_FLUSH_MS);
    expect(lines.some((line) => line.includes("could not store analyze state"))).toBe(true);
    db.close();
  });
});
