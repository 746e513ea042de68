import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createLogger } from "../src/log.js";
import { DEAD_LETTER_RETENTION_MS, DUE_TASKS_SQL, Outbox, type TaskOutcome } from "../src/outbox/outbox.js";
import { openDatabase, type Db } from "../src/store/database.js";
import { ManualClock } from "./helpers/clock.js";
import { tempDir } from "./helpers/server.js";

const db = openDatabase(tempDir());
afterAll(() => db.close());

describe("outbox shutdown", () => {
  it("flushes what is due, and what falls due meanwhile, for the grace period at most, leaving what still runs for the next start", async () => {
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
    // The grace period is a timer: fake timers move it by hand, while setImmediate (outcomes are recorded on it) stays real.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      outbox.start();
      let stopped = false;
      const stopping = outbox.stop(200).then(() => (stopped = true));
      clock.advance(20);
      const turns = async (n: number) => {
        for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
      };
      // The quick task's outcome is recorded, and the shutdown still waits for the hanging one, until the grace period ends.
      await turns(10);
      vi.advanceTimersByTime(199);
      await turns(10);
      expect(stopped).toBe(false);
      vi.advanceTimersByTime(1);
      await turns(10);
      expect(stopped).toBe(true);
      await stopping;
    } finally {
      vi.useRealTimers();
    }
    // The quick task's retry fell due while the shutdown waited for the hanging one: it ran, and is done.
    expect(ran).toEqual(["quick 0", "hanging", "quick 1"]);
    expect(lines.some((line) => line.includes("end of the shutdown grace period"))).toBe(true);
    // The hanging task ends after the shutdown gave up: nothing is recorded, its row stays pending to run again.
    release({ kind: "done" });
    await new Promise((resolve) => setImmediate(resolve));
    const rows = db.prepare("SELECT kind, status, attempts FROM outbox ORDER BY id").all();
    expect(rows).toEqual([{ kind: "hanging", status: "pending", attempts: 0 }]);
  });
});

describe("outbox fairness", () => {
  let fairDb: Db;
  let clock: ManualClock;
  let outbox: Outbox;
  let releases: Array<() => void>;
  /** A task that hangs, as a delivery to a receiver that never answers, until released (at the end of each test). */
  const hang = () => new Promise<TaskOutcome>((resolve) => releases.push(() => resolve({ kind: "done" })));

  beforeEach(() => {
    fairDb = openDatabase(tempDir());
    clock = new ManualClock();
    outbox = new Outbox(fairDb, clock, createLogger(() => undefined));
    releases = [];
  });
  afterEach(async () => {
    for (const release of releases.splice(0)) release();
    await outbox.stop(1_000);
    fairDb.close();
  });

  it("runs one account's tasks beside another's that hang, however many of those came first", async () => {
    let receiverStuck = true;
    const ran: string[] = [];
    outbox.register("deliver", (task) => {
      const tenant = task.tenant?.accountId ?? "";
      ran.push(tenant);
      if (tenant === "acct_stuck" && receiverStuck) return hang();
      return Promise.resolve({ kind: "done" });
    });
    // Fifty deliveries to a receiver that never answers, queued before another account's one.
    for (let i = 0; i < 50; i++) outbox.enqueue("deliver", { accountId: "acct_stuck", environment: "live" }, { i });
    outbox.enqueue("deliver", { accountId: "acct_other", environment: "live" }, {});
    // The runner's own query (outbox.ts): past full tenants from the index alone, no row read.
    const plan = fairDb.prepare(`EXPLAIN QUERY PLAN ${DUE_TASKS_SQL}`).all({ dueBy: 0, full: '["acct_stuck/live|local"]', limit: 64 });
    expect(JSON.stringify(plan)).toMatch(/COVERING INDEX outbox_due/);
    outbox.start();
    await expect.poll(() => ran.includes("acct_other"), { timeout: 2_000 }).toBe(true);
    // The stuck account holds its share of the slots, no more.
    expect(ran.filter((tenant) => tenant === "acct_stuck")).toHaveLength(8);
    receiverStuck = false;
  });

  it("runs an account's other endpoints and its events beside one endpoint that hangs", async () => {
    const ran: string[] = [];
    const tenant = { accountId: "acct_one", environment: "live" as const };
    outbox.register("deliver", (task) => {
      const { to } = task.payload as { to: string };
      ran.push(to);
      if (to === "dead") return hang();
      return Promise.resolve({ kind: "done" });
    });
    outbox.register("local", () => {
      ran.push("local");
      return Promise.resolve({ kind: "done" });
    });
    // Fifty deliveries to an endpoint that never answers, queued first; then the same account's other work.
    for (let i = 0; i < 50; i++) outbox.enqueue("deliver", tenant, { to: "dead" }, { lane: "whe_dead" });
    outbox.enqueue("deliver", tenant, { to: "alive" }, { lane: "whe_alive" });
    outbox.enqueue("local", tenant, {});
    outbox.start();
    await expect.poll(() => ran.includes("alive") && ran.includes("local"), { timeout: 2_000 }).toBe(true);
    // The endpoint that hangs holds its lane's places, no more.
    expect(ran.filter((to) => to === "dead")).toHaveLength(4);
  });

  it("gives a lane whose last three attempts failed one place, until one succeeds", async () => {
    const tenant = { accountId: "acct_one", environment: "live" as const };
    let started = 0;
    outbox.register("deliver", (task) => {
      const { phase } = task.payload as { phase: string };
      if (phase === "fail") return Promise.resolve({ kind: "retry", at: clock.now() + 3_600_000, error: "timeout" });
      started++;
      return hang();
    });
    for (let i = 0; i < 3; i++) outbox.enqueue("deliver", tenant, { phase: "fail" }, { lane: "whe_down" });
    await outbox.drain();
    // Three failures in a row: the lane now runs one task at a time.
    for (let i = 0; i < 10; i++) outbox.enqueue("deliver", tenant, { phase: "hang" }, { lane: "whe_down" });
    outbox.start();
    await expect.poll(() => started, { timeout: 2_000 }).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(started).toBe(1);
    // It succeeds: the lane has its four places again.
    releases.shift()?.();
    await expect.poll(() => started, { timeout: 2_000 }).toBe(5);
  });

  it("fans events out however many receivers hang, across however many accounts", async () => {
    let hanging = 0;
    let fannedOut = false;
    outbox.register("deliver", () => {
      hanging++;
      return hang();
    });
    outbox.register("event", () => {
      fannedOut = true;
      return Promise.resolve({ kind: "done" });
    });
    // Sixteen accounts, each with four endpoints that never answer, four deliveries each: 256 waiting.
    for (let account = 0; account < 16; account++) {
      for (let endpoint = 0; endpoint < 4; endpoint++) {
        for (let i = 0; i < 4; i++) outbox.enqueue("deliver", { accountId: `acct_${account}`, environment: "live" }, {}, { lane: `whe_${account}_${endpoint}` });
      }
    }
    outbox.enqueue("event", { accountId: "acct_other", environment: "live" }, {});
    outbox.start();
    await expect.poll(() => fannedOut, { timeout: 2_000 }).toBe(true);
    // The receivers hold the service's network places, and no more.
    expect(hanging).toBe(64);
  });
});


describe("outbox retries", () => {
  it("retries a handler that throws after 1 s, 5 s, 30 s, 2 min and 10 min, and moves it to the dead letters only after the last attempt", async () => {
    const retryDb = openDatabase(tempDir());
    const clock = new ManualClock();
    const outbox = new Outbox(retryDb, clock, createLogger(() => undefined));
    const tenant = { accountId: "acct_flaky", environment: "live" as const };
    const attempts: number[] = [];
    outbox.register("flaky", (task) => {
      attempts.push(task.attempts);
      return Promise.reject(new Error(`receiver down (attempt ${task.attempts})`));
    });
    outbox.enqueue("flaky", tenant, {});
    const row = () => retryDb.prepare("SELECT status, attempts, last_error AS lastError FROM outbox").get();

    await outbox.drain();
    expect(attempts).toEqual([0]);
    for (const [i, delay] of [1_000, 5_000, 30_000, 120_000, 600_000].entries()) {
      expect(row()).toEqual({ status: "pending", attempts: i + 1, lastError: `receiver down (attempt ${i})` });
      // Not a millisecond early.
      clock.advance(delay - 1);
      await outbox.drain();
      expect(attempts).toHaveLength(i + 1);
      clock.advance(1);
      await outbox.drain();
      expect(attempts).toHaveLength(i + 2);
    }
    expect(attempts).toEqual([0, 1, 2, 3, 4, 5]);
    expect(row()).toEqual({ status: "dead", attempts: 6, lastError: "receiver down (attempt 5)" });
    expect(outbox.deadLetters(tenant, 10, 0)).toMatchObject([{ kind: "flaky", attempts: 6, lastError: "receiver down (attempt 5)" }]);
    // A dead letter is not run again, however long one waits.
    clock.advance(86_400_000);
    await outbox.drain();
    expect(attempts).toHaveLength(6);
    // It is kept for a replay for 30 days from when it died, then deleted.
    const diedAt = clock.now() - 86_400_000;
    expect(await outbox.pruneDeadLetters(diedAt + DEAD_LETTER_RETENTION_MS - 1)).toBe(0);
    expect(outbox.deadLetters(tenant, 10, 0)).toHaveLength(1);
    expect(await outbox.pruneDeadLetters(diedAt + DEAD_LETTER_RETENTION_MS)).toBe(1);
    expect(outbox.deadLetters(tenant, 10, 0)).toEqual([]);
    retryDb.close();
  });
});
