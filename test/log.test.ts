import { describe, expect, it } from "vitest";
import { RepeatedFailureLog, createLogger } from "../src/log.js";

describe("a failure that repeats", () => {
  it("is logged when it first happens, then at most once a minute with how many times it happened", () => {
    const lines: Array<Record<string, unknown>> = [];
    let now = 0;
    const failures = new RepeatedFailureLog(createLogger((line) => lines.push(JSON.parse(line) as Record<string, unknown>)), "warn", "WAL checkpoint failed", 60_000, () => now);
    // A full disk: a failure every 200 ms for two and a half minutes.
    for (; now < 150_000; now += 200) failures.failed({ error: "database or disk is full" });
    expect(lines.map(({ level, msg, error, repeated }) => ({ level, msg, error, repeated }))).toEqual([
      { level: "warn", msg: "WAL checkpoint failed", error: "database or disk is full", repeated: undefined },
      // The line at 60 s stands for itself and the 299 failures held back before it.
      { level: "warn", msg: "WAL checkpoint failed", error: "database or disk is full", repeated: 300 },
      { level: "warn", msg: "WAL checkpoint failed", error: "database or disk is full", repeated: 300 },
    ]);
    // Once a minute has passed since the last line, the next failure is logged at once, counting the 149 of the
    // last 30 s that were held back; and the one after it as a first one, none being held back.
    now += 60_000;
    failures.failed({ error: "disk I/O error" });
    expect(lines.at(-1)).toMatchObject({ error: "disk I/O error", repeated: 150 });
    now += 60_000;
    failures.failed({ error: "disk I/O error" });
    expect(lines).toHaveLength(5);
    expect(lines.at(-1)?.repeated).toBeUndefined();
  });
});
