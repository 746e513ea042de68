import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/log.js";
import { DEAD_LETTER_RETENTION_MS, Outbox, PRUNE_DEAD_LETTERS_SQL } from "../src/outbox/outbox.js";
import { Maintenance, type PruneTask } from "../src/server/maintenance.js";
import { AnalyzeStateRepository, PRUNE_ANALYZE_STATE_SQL } from "../src/store/analyze-state.js";
import { openDatabase, type Db } from "../src/store/database.js";
import { IDEMPOTENCY_TTL_MS, IdempotencyRepository, PRUNE_IDEMPOTENCY_SQL } from "../src/store/idempotency.js";
import { ListRepository, PRUNE_LIST_ENTRIES_SQL } from "../src/store/lists.js";
import { PRUNE_STEP_ROWS } from "../src/store/prune-steps.js";
import { ManualClock } from "./helpers/clock.js";
import { tempDir } from "./helpers/server.js";

const tenant = { accountId: "acct_kept", environment: "live" as const };
const NOW = 1_800_000_000_000;
/** More than two steps' rows: a prune that stopped after its first step would leave some. */
const MANY = 2 * PRUNE_STEP_ROWS + 17;

let db: Db | undefined;
afterEach(() => {
  db?.close();
  db = undefined;
});

function database(): Db {
  db = openDatabase(tempDir());
  return db;
}

/** The plan SQLite makes for `sql` (a prune's DELETE), one detail per line. */
function plan(store: Db, sql: string, ...params: unknown[]): string {
  return (store.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as Array<{ detail: string }>).map((row) => row.detail).join("\n");
}

/** Counts what a step-wise prune does between its steps: the event loop turns (an immediate runs) between them. */
async function pruneCountingTurns(prune: () => Promise<number>): Promise<{ deleted: number; turns: number }> {
  let turns = 0;
  let counting = true;
  const tick = (): void => {
    if (!counting) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  const deleted = await prune();
  counting = false;
  return { deleted, turns };
}

describe("the background prunes", () => {
  it("delete idempotency answers past 24 hours a step at a time, through an index on their time, and keep the rest", async () => {
    const store = database();
    const idempotency = new IdempotencyRepository(store);
    const answer = { requestHash: "h", response: new Uint8Array([1]) };
    store.transaction(() => {
      for (let i = 0; i < MANY; i++) idempotency.claim(tenant, `old_${i}`, answer, NOW - IDEMPOTENCY_TTL_MS - i);
      idempotency.claim(tenant, "fresh", answer, NOW - IDEMPOTENCY_TTL_MS + 1);
    })();
    expect(plan(store, PRUNE_IDEMPOTENCY_SQL, NOW)).toMatch(/USING (COVERING )?INDEX idempotency_keys_by_time/);
    const { deleted, turns } = await pruneCountingTurns(() => idempotency.prune(NOW));
    expect(deleted).toBe(MANY);
    expect(turns).toBeGreaterThanOrEqual(2);
    expect(idempotency.find(tenant, "fresh", NOW)).toBeDefined();
    expect(store.prepare("SELECT COUNT(*) AS n FROM idempotency_keys").get()).toEqual({ n: 1 });
  });

  it("delete expired list entries a step at a time, through an index on their expiry, never one without", async () => {
    const store = database();
    const lists = new ListRepository(store);
    store.transaction(() => {
      lists.put(tenant, { name: "blocked_ips", kind: "ip", type: "deny", description: "", automatic: false }, NOW);
      for (let i = 0; i < MANY; i++) lists.putEntry(tenant, "blocked_ips", { value: `10.0.${Math.floor(i / 256)}.${i % 256}`, expiresAt: NOW - i }, NOW - MANY);
      lists.putEntry(tenant, "blocked_ips", { value: "192.0.2.1", expiresAt: undefined }, NOW);
      lists.putEntry(tenant, "blocked_ips", { value: "192.0.2.2", expiresAt: NOW + 1 }, NOW);
    })();
    expect(plan(store, PRUNE_LIST_ENTRIES_SQL, NOW)).toMatch(/USING (COVERING )?INDEX list_entries_expiry/);
    const { deleted, turns } = await pruneCountingTurns(() => lists.prune(NOW));
    expect(deleted).toBe(MANY);
    expect(turns).toBeGreaterThanOrEqual(2);
    expect(lists.page(tenant, "blocked_ips", NOW, 10, 0).map((entry) => entry.value).sort()).toEqual(["192.0.2.1", "192.0.2.2"]);
  });

  it("delete expired analyze state a step at a time, and keep what has not expired", async () => {
    const store = database();
    const state = new AnalyzeStateRepository(store, createLogger(() => undefined));
    for (let i = 0; i < MANY; i++) state.put(tenant, `old_${i}`, { i }, NOW - i);
    state.put(tenant, "live", { i: -1 }, NOW + 1);
    state.flush();
    expect(plan(store, PRUNE_ANALYZE_STATE_SQL, NOW)).toMatch(/USING (COVERING )?INDEX analyze_state_expiry/);
    const { deleted, turns } = await pruneCountingTurns(() => state.prune(NOW));
    expect(deleted).toBe(MANY);
    expect(turns).toBeGreaterThanOrEqual(2);
    expect(store.prepare("SELECT key FROM analyze_state").all()).toEqual([{ key: "live" }]);
  });

  it("delete dead letters past their retention through an index on when they died, stopping between steps when asked", async () => {
    const store = database();
    const outbox = new Outbox(store, new ManualClock(NOW), createLogger(() => undefined));
    const insert = store.prepare("INSERT INTO outbox (kind, account_id, environment, payload, status, next_attempt_at, created_at, updated_at) VALUES ('webhook.delivery', ?, ?, '{}', ?, 0, 0, ?)");
    store.transaction(() => {
      for (let i = 0; i < MANY; i++) insert.run(tenant.accountId, tenant.environment, "dead", NOW - DEAD_LETTER_RETENTION_MS - i);
      insert.run(tenant.accountId, tenant.environment, "dead", NOW - DEAD_LETTER_RETENTION_MS + 1);
      insert.run(tenant.accountId, tenant.environment, "pending", 0);
    })();
    expect(plan(store, PRUNE_DEAD_LETTERS_SQL, NOW, "[]")).toMatch(/USING (COVERING )?INDEX outbox_dead_by_time/);
    // Asked to stop (the service shutting down): the step under way ends, and no other starts.
    expect(await outbox.pruneDeadLetters(NOW, () => true)).toBe(PRUNE_STEP_ROWS);
    expect(await outbox.pruneDeadLetters(NOW)).toBe(MANY - PRUNE_STEP_ROWS);
    expect(store.prepare("SELECT status, COUNT(*) AS n FROM outbox GROUP BY status ORDER BY status").all()).toEqual([
      { status: "dead", n: 1 },
      { status: "pending", n: 1 },
    ]);
  });
});

describe("the background maintenance", () => {
  it("runs every task even when one before it fails, logging what each deleted and what failed", async () => {
    const lines: string[] = [];
    const ran: string[] = [];
    const task = (what: string, outcome: number | Error): PruneTask => ({
      what,
      prune: (now) => {
        ran.push(`${what} at ${now}`);
        return outcome instanceof Error ? Promise.reject(outcome) : Promise.resolve(outcome);
      },
    });
    const maintenance = new Maintenance([task("first", 3), task("second", new Error("database is locked")), task("third", 0), task("fourth", 5)], new ManualClock(NOW), createLogger((line) => lines.push(line)));
    await maintenance.run();
    await maintenance.stop();
    expect(ran).toEqual([`first at ${NOW}`, `second at ${NOW}`, `third at ${NOW}`, `fourth at ${NOW}`]);
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toEqual([
      expect.objectContaining({ level: "info", msg: "rows past their time deleted", what: "first", rows: 3 }),
      expect.objectContaining({ level: "warn", msg: "background pruning failed", what: "second", error: "database is locked" }),
      expect.objectContaining({ level: "info", msg: "rows past their time deleted", what: "fourth", rows: 5 }),
    ]);
  });

  it("runs one run at a time, and stops a run under way at its next step, waiting for it", async () => {
    let release: () => void = () => undefined;
    let startedRuns = 0;
    let stoppedSeen = false;
    const slow: PruneTask = {
      what: "slow",
      prune: async (_now, stopped) => {
        startedRuns++;
        await new Promise<void>((resolve) => (release = resolve));
        stoppedSeen = stopped();
        return 0;
      },
    };
    const after: PruneTask = { what: "after", prune: () => Promise.reject(new Error("must not run once stopped")) };
    const lines: string[] = [];
    const maintenance = new Maintenance([slow, after], new ManualClock(NOW), createLogger((line) => lines.push(line)));
    const first = maintenance.run();
    // A second run asked for while one is under way is that run.
    expect(maintenance.run()).toBe(first);
    await new Promise((resolve) => setImmediate(resolve));
    let stopDone = false;
    const stopping = maintenance.stop().then(() => (stopDone = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(stopDone).toBe(false);
    release();
    await stopping;
    expect(startedRuns).toBe(1);
    expect(stoppedSeen).toBe(true);
    expect(lines).toEqual([]);
  });
});
