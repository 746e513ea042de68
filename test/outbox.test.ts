import { afterAll, describe, expect, it } from "vitest";
import { createLogger } from "../src/log.js";
import { Outbox, type TaskOutcome } from "../src/outbox/outbox.js";
import { openDatabase } from "../src/store/database.js";
import { ManualClock } from "./helpers/clock.js";
import { tempDir } from "./helpers/server.js";

const db = openDatabase(tempDir());
afterAll(() => db.close());

describe("outbox shutdown", () => {
  it("flushes what is due for the grace period at most, leaving what still runs, and later retries, for the next start", async () => {
    const clock = new ManualClock();
    const lines: string[] = [];
    const outbox = new Outbox(db, clock, createLogger((line) => lines.push(line)));
    const ran: string[] = [];
    let release!: (outcome: TaskOutcome) => void;
    outbox.register("quick", async (task) => {
      ran.push(`quick ${task.attempts}`);
      // The first attempt fails: its retry falls due while the shutdown is still waiting for the hanging task.
      return task.attempts === 0 ? { kind: "retry", at: clock.now() + 10, error: "try again" } : { kind: "done" };
    });
    outbox.register("hanging", () => {
      ran.push("hanging");
      return new Promise<TaskOutcome>((resolve) => (release = resolve));
    });
    outbox.enqueue("quick", undefined, {});
    outbox.enqueue("hanging", undefined, {});
    outbox.start();

    const started = performance.now();
    const stopping = outbox.stop(200);
    clock.advance(20);
    await stopping;
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(ran).toEqual(["quick 0", "hanging"]);
    expect(lines.some((line) => line.includes("end of the shutdown grace period"))).toBe(true);
    // The hanging task ends after the shutdown gave up: nothing is recorded, its row stays pending to run again.
    release({ kind: "done" });
    await new Promise((resolve) => setImmediate(resolve));
    const rows = db.prepare("SELECT kind, status, attempts FROM outbox ORDER BY id").all();
    expect(rows).toEqual([
      { kind: "quick", status: "pending", attempts: 1 },
      { kind: "hanging", status: "pending", attempts: 0 },
    ]);
  });
});
