import type { Clock } from "../clock.js";
import { RepeatedFailureLog, type Logger } from "../log.js";
import type { Db } from "../store/database.js";
import { PRUNE_STEP_ROWS, pruneInSteps } from "../store/prune-steps.js";
import type { Tenant } from "../store/tenant.js";

/** One unit of background work, as a handler sees it. */
export interface OutboxTask {
  id: number;
  kind: string;
  tenant: Tenant | undefined;
  payload: unknown;
  /** Attempts made before this one. */
  attempts: number;
  createdAt: number;
}

/** What a handler made of one attempt. */
export type TaskOutcome =
  | { kind: "done" }
  | { kind: "retry"; at: number; error: string }
  | { kind: "dead"; error: string };

export type TaskHandler = (task: OutboxTask) => Promise<TaskOutcome>;

/** Retry schedule of handlers that throw: 1 s, 5 s, 30 s, 2 min, 10 min, then the dead-letter queue. */
const DEFAULT_BACKOFF_MS = [1_000, 5_000, 30_000, 120_000, 600_000];
/** How long a dead letter is kept for a replay (docs/webhooks.md): 30 days from when it died. */
export const DEAD_LETTER_RETENTION_MS = 30 * 86_400_000;
/** How often the background runner looks past the due rows of places that are full. */
const FULL_PLACES_LOOK_MS = 100;
/**
 * Running places, so that no account, no destination of one, and no kind of work holds them all. A task that
 * waits on a destination (its lane: a webhook endpoint, the consortium hub) takes one of its lane's
 * MAX_RUNNING_PER_LANE (one only, MAX_RUNNING_PER_FAILING_LANE, while the lane's last FAILING_STREAK attempts
 * all failed: a receiver down or never answering), one of its account's MAX_RUNNING_PER_TENANT_NETWORK and one
 * of the service's MAX_RUNNING_NETWORK. A task done here (events fanned out to endpoints and live streams,
 * decision follow-ups) takes one of its account's MAX_RUNNING_PER_TENANT_LOCAL and one of the service's
 * MAX_RUNNING_LOCAL, which receivers never take: however many of them hang, events go on being fanned out.
 */
const MAX_RUNNING_PER_LANE = 4;
const MAX_RUNNING_PER_FAILING_LANE = 1;
const FAILING_STREAK = 3;
const MAX_RUNNING_PER_TENANT_NETWORK = 16;
const MAX_RUNNING_PER_TENANT_LOCAL = 8;
const MAX_RUNNING_NETWORK = 64;
const MAX_RUNNING_LOCAL = 16;
/** Tasks running at once. */
const BATCH = MAX_RUNNING_NETWORK + MAX_RUNNING_LOCAL;
/** Lanes whose failures are remembered; past it the oldest are forgotten (and get their full share again). */
const MAX_TRACKED_LANES = 10_000;
/** The runner also looks for due tasks this often (tasks from other processes, retries). */
const POLL_MS = 500;

/**
 * One step of the dead letters' prune: those that died by a time (updated_at), but the kinds kept (a JSON
 * array). Through outbox_dead_by_time, named: by its equality on status the planner would take outbox_due,
 * and read every dead letter in it on every step.
 */
export const PRUNE_DEAD_LETTERS_SQL = `DELETE FROM outbox WHERE id IN
  (SELECT id FROM outbox INDEXED BY outbox_dead_by_time
   WHERE status = 'dead' AND updated_at <= ? AND kind NOT IN (SELECT value FROM json_each(?)) LIMIT ${PRUNE_STEP_ROWS})`;

export interface DeadLetter {
  id: number;
  kind: string;
  attempts: number;
  lastError: string;
  createdAt: number;
  updatedAt: number;
  payload: unknown;
}

/**
 * A task as it is inserted, before it has a row id. The decision writer
 * (another thread) inserts the tasks of a decide in its own transaction:
 * they are collected on the request thread ({@link Outbox.collect}) and
 * travel with the decision.
 */
export interface OutboxEntry {
  kind: string;
  accountId: string | null;
  environment: "test" | "live" | null;
  /** The destination the task waits on ('' for work done here): it shares running places with its lane. */
  lane: string;
  /** The payload as JSON. */
  payload: string;
  /** When it is first due. */
  at: number;
  now: number;
}

/** When a task is first due (now when undefined), and the destination it waits on ('' when none). */
export interface EnqueueOptions {
  runAt?: number;
  lane?: string;
}

/** A task's entry: the payload serialised. */
function outboxEntry(kind: string, tenant: Tenant | undefined, payload: unknown, now: number, options: EnqueueOptions = {}): OutboxEntry {
  return outboxEntryOfJson(kind, tenant, JSON.stringify(payload), now, options);
}

/** The same, for a payload already serialised (on another thread, say). */
export function outboxEntryOfJson(kind: string, tenant: Tenant | undefined, payload: string, now: number, options: EnqueueOptions = {}): OutboxEntry {
  return { kind, accountId: tenant?.accountId ?? null, environment: tenant?.environment ?? null, lane: options.lane ?? "", payload, at: options.runAt ?? now, now };
}

/** A stored payload, parsed; undefined when it is not JSON (such a task can never run). */
function parsePayload(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A pending task as read back, with its tenant and its payload parsed (undefined when not JSON). */
interface PendingTask {
  id: number;
  tenant: Tenant | undefined;
  payload: unknown;
}

/**
 * The outbox table over one connection: the outbox's own, or the decision
 * writer's, which inserts, carries out and removes the follow-ups of its
 * decisions itself (decisions/follow-up.ts).
 */
export class OutboxTable {
  private readonly insertStmt;
  private readonly deleteStmt;
  private readonly pendingOfKindStmt;
  private readonly statusOfStmt;

  constructor(db: Db) {
    this.insertStmt = db.prepare<[OutboxEntry]>(
      `INSERT INTO outbox (kind, account_id, environment, lane, payload, status, next_attempt_at, created_at, updated_at)
       VALUES (@kind, @accountId, @environment, @lane, @payload, 'pending', @at, @now, @now)`,
    );
    this.deleteStmt = db.prepare<[number]>("DELETE FROM outbox WHERE id = ?");
    this.pendingOfKindStmt = db.prepare<[string, number, number], OutboxRow>(
      "SELECT * FROM outbox WHERE kind = ? AND status = 'pending' AND id > ? ORDER BY id LIMIT ?",
    );
    this.statusOfStmt = db.prepare<[string, string, string, string], { status: "pending" | "dead" }>(
      "SELECT status FROM outbox WHERE kind = ? AND account_id = ? AND environment = ? AND instr(payload, ?) > 0 ORDER BY status = 'pending' DESC LIMIT 1",
    );
  }

  /** The new task's id. */
  insert(entry: OutboxEntry): number {
    return Number(this.insertStmt.run(entry).lastInsertRowid);
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  /**
   * Where a tenant's task of this kind whose payload holds `fragment` stands: still to run, a dead letter,
   * or undefined when there is none (done, or never queued). A pending one wins over a dead one.
   */
  statusOf(kind: string, tenant: Tenant, fragment: string): "pending" | "dead" | undefined {
    return this.statusOfStmt.get(kind, tenant.accountId, tenant.environment, fragment)?.status;
  }

  /** Up to `limit` pending tasks of one kind with ids above `afterId`, oldest first. */
  pendingOfKind(kind: string, afterId: number, limit: number): PendingTask[] {
    return this.pendingOfKindStmt.all(kind, afterId, limit).map((row) => ({ id: row.id, tenant: tenantOf(row), payload: parsePayload(row.payload) }));
  }
}

/** A dead letter's payload: what was stored, or the text itself when it is not JSON (such a task dies at once). */
function storedPayload(text: string): unknown {
  const payload = parsePayload(text);
  return payload === undefined ? { unparsed: text } : payload;
}

/** The service-wide places of network and of local work. */
const ALL_NETWORK = "*|network";
const ALL_LOCAL = "*|local";

/** The place of a task's lane: its destination, within its account and environment. */
function lanePlace(accountId: string | null, environment: string | null, lane: string): string {
  return `${accountId ?? ""}/${environment ?? ""}|lane|${lane}`;
}

/**
 * The running places a task takes (see MAX_RUNNING_PER_LANE), written as the due query writes them, so that
 * it can pass over the full ones without reading their rows.
 */
function placesOf(accountId: string | null, environment: string | null, lane: string): string[] {
  const tenant = `${accountId ?? ""}/${environment ?? ""}`;
  if (lane === "") return [`${tenant}|local`, ALL_LOCAL];
  return [lanePlace(accountId, environment, lane), `${tenant}|network`, ALL_NETWORK];
}

function tenantOf(row: OutboxRow): Tenant | undefined {
  return row.account_id && row.environment ? { accountId: row.account_id, environment: row.environment } : undefined;
}

/**
 * The due tasks outside the full places (`full`: a JSON array of placesOf keys), oldest first: from the index
 * alone, so that the rows of full places are passed over without reading them.
 */
export const DUE_TASKS_SQL = `SELECT id, account_id, environment, lane FROM outbox
  WHERE status = 'pending' AND next_attempt_at <= @dueBy
    AND ifnull(account_id, '') || '/' || ifnull(environment, '') || iif(lane = '', '|local', '|lane|' || lane) NOT IN (SELECT value FROM json_each(@full))
    AND (lane = '' OR ifnull(account_id, '') || '/' || ifnull(environment, '') || '|network' NOT IN (SELECT value FROM json_each(@full)))
    AND iif(lane = '', '*|local', '*|network') NOT IN (SELECT value FROM json_each(@full))
  ORDER BY next_attempt_at, id LIMIT @limit`;

interface OutboxRow {
  id: number;
  kind: string;
  account_id: string | null;
  environment: "test" | "live" | null;
  lane: string;
  payload: string;
  attempts: number;
  last_error: string;
  created_at: number;
  updated_at: number;
}

/**
 * The durable outbox: side effects are written as rows in the same SQLite
 * transaction as the change that causes them, and a runner in the server
 * carries them out afterwards, retrying with backoff. After a crash the rows
 * are still there, and a task that ran but was not yet marked done runs
 * again: the decision follow-ups are idempotent (decisions/follow-up.ts), an
 * event's fan-out commits with the removal of its task ({@link finishWith}),
 * and what leaves the service is at least once — a delivery cut short by a
 * crash is sent again, with the same event id (docs/webhooks.md). Tasks that exhaust
 * their retries stay as 'dead' rows: the one dead-letter queue of the service.
 */
export class Outbox {
  private readonly handlers = new Map<string, TaskHandler>();
  /** Kinds whose dead letters {@link pruneDeadLetters} leaves, however old. */
  private readonly deadLettersKept = new Set<string>();
  /** The table, for code that carries out tasks of its own kind in its own transactions (decisions/follow-up.ts). */
  readonly table: OutboxTable;
  /** While {@link collect} runs: where enqueued tasks go instead of the table. */
  private collecting: OutboxEntry[] | undefined;
  private readonly dueStmt;
  private readonly rowStmt;
  private readonly retryStmt;
  private readonly deadStmt;
  private readonly pendingStmt;
  private readonly deadListStmt;
  private readonly replayStmt;
  private readonly pruneDeadStmt;
  private readonly settle;
  private readonly finishTransaction;
  private timer: NodeJS.Timeout | undefined;
  private stopped = true;
  /** Set when shutdown gave up waiting: tasks still running finish unrecorded, and nothing new starts. */
  private abandoned = false;
  private wakePending = false;
  /** Tasks running now, by row id, with the places they take; settles when the task's outcome is recorded. */
  private readonly inFlight = new Map<number, { settled: Promise<void>; resolve(): void; places: string[] }>();
  /** How many running tasks take each place (placesOf). */
  private readonly runningPerPlace = new Map<string, number>();
  /** Failed attempts in a row, by lane place; a success forgets the lane. */
  private readonly failuresInARow = new Map<string, number>();
  /** When the background runner last looked past full places' rows (performance.now()). */
  private lastLookPastFull = Number.NEGATIVE_INFINITY;
  private finished: Array<[OutboxRow, TaskOutcome]> = [];
  /** Outcomes that could not be recorded (a full disk), retried every poll: logged as a failure that repeats. */
  private readonly settleFailed: RepeatedFailureLog;

  constructor(
    db: Db,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {
    this.settleFailed = new RepeatedFailureLog(logger, "error", "could not record background task outcomes; trying again");
    this.table = new OutboxTable(db);
    this.dueStmt = db.prepare<[{ dueBy: number; full: string; limit: number }], { id: number; account_id: string | null; environment: string | null; lane: string }>(DUE_TASKS_SQL);
    this.rowStmt = db.prepare<[number], OutboxRow>("SELECT * FROM outbox WHERE id = ? AND status = 'pending'");
    this.retryStmt = db.prepare<[number, string, number, number]>(
      "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ?, updated_at = ? WHERE id = ?",
    );
    this.deadStmt = db.prepare<[string, number, number]>(
      "UPDATE outbox SET status = 'dead', attempts = attempts + 1, last_error = ?, updated_at = ? WHERE id = ?",
    );
    this.pendingStmt = db.prepare<[], { n: number }>("SELECT COUNT(*) AS n FROM outbox WHERE status = 'pending'");
    this.deadListStmt = db.prepare<[string, string, number, number], OutboxRow>(
      "SELECT * FROM outbox WHERE status = 'dead' AND account_id = ? AND environment = ? ORDER BY id LIMIT ? OFFSET ?",
    );
    this.settle = db.transaction((results: Array<[OutboxRow, TaskOutcome]>) => {
      const now = this.clock.now();
      for (const [row, outcome] of results) {
        if (outcome.kind === "done") this.table.delete(row.id);
        else if (outcome.kind === "retry") this.retryStmt.run(outcome.at, outcome.error, now, row.id);
        else {
          this.deadStmt.run(outcome.error, now, row.id);
          this.logger.log("warn", "background task moved to the dead-letter queue", { taskId: row.id, kind: row.kind, error: outcome.error });
        }
      }
    });
    this.finishTransaction = db.transaction((id: number, work: () => void) => {
      work();
      this.table.delete(id);
    });
    this.pruneDeadStmt = db.prepare<[number, string]>(PRUNE_DEAD_LETTERS_SQL);
    this.replayStmt = db.prepare<[number, number, number, string, string]>(
      "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ? WHERE id = ? AND status = 'dead' AND account_id = ? AND environment = ?",
    );
  }

  /**
   * For a handler whose work is writes to this database (an event's fan-out into delivery tasks): runs `work`
   * and removes the task in one transaction, so a crash leaves either the task or its work, never both to be
   * done again. Returns the handler's outcome.
   */
  finishWith(task: OutboxTask, work: () => void): TaskOutcome {
    this.finishTransaction.immediate(task.id, work);
    return { kind: "done" };
  }

  /**
   * Who carries out tasks of a kind. `keepDeadLetters`: its dead letters are never pruned, for a kind whose
   * dead letter is what other code reads to tell a failure from tampering (decision follow-ups).
   */
  register(kind: string, handler: TaskHandler, options: { keepDeadLetters?: boolean } = {}): void {
    this.handlers.set(kind, handler);
    if (options.keepDeadLetters) this.deadLettersKept.add(kind);
  }

  /** Adds a task; call it inside the transaction of the change that causes it. */
  enqueue(kind: string, tenant: Tenant | undefined, payload: unknown, options: EnqueueOptions = {}): void {
    const entry = outboxEntry(kind, tenant, payload, this.clock.now(), options);
    if (this.collecting) {
      this.collecting.push(entry);
      return;
    }
    this.table.insert(entry);
    this.wakeSoon();
  }

  /**
   * Runs `work` and returns the tasks it enqueued instead of inserting them:
   * for a transaction committed by another connection (the decision writer),
   * which inserts them with an {@link OutboxTable}. Call {@link notify}
   * once it has committed.
   */
  collect(work: () => void): OutboxEntry[] {
    const outer = this.collecting;
    const entries: OutboxEntry[] = [];
    this.collecting = entries;
    try {
      work();
    } finally {
      this.collecting = outer;
    }
    return entries;
  }

  /** Tasks were committed by another connection: look for due work soon. */
  notify(): void {
    this.wakeSoon();
  }

  /** Tasks not yet carried out (the status report's backlog). */
  pending(): number {
    return this.pendingStmt.get()?.n ?? 0;
  }

  /**
   * Deletes the dead letters that died {@link DEAD_LETTER_RETENTION_MS} ago or longer (but those of kinds
   * registered to keep them), a step at a time (store/prune-steps.ts), until none is left or `stopped` says so;
   * returns how many.
   */
  pruneDeadLetters(now: number, stopped: () => boolean = () => false): Promise<number> {
    const kept = JSON.stringify([...this.deadLettersKept]);
    return pruneInSteps(() => this.pruneDeadStmt.run(now - DEAD_LETTER_RETENTION_MS, kept).changes, stopped);
  }

  deadLetters(tenant: Tenant, limit: number, offset: number): DeadLetter[] {
    return this.deadListStmt.all(tenant.accountId, tenant.environment, limit, offset).map((row) => ({
      id: row.id,
      kind: row.kind,
      attempts: row.attempts,
      lastError: row.last_error,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
      payload: storedPayload(row.payload),
    }));
  }

  /** Puts a dead letter back in the queue; false when there is no such dead letter for the tenant. */
  replay(tenant: Tenant, id: number): boolean {
    const now = this.clock.now();
    const replayed = this.replayStmt.run(now, now, id, tenant.accountId, tenant.environment).changes === 1;
    if (replayed) this.wake();
    return replayed;
  }

  start(): void {
    this.stopped = false;
    this.wake();
  }

  /**
   * Stops polling and runs the tasks that are due, and those that fall due meanwhile (SIGTERM flush), for at
   * most `graceMs`: the deliveries a decision's events fan out into while it runs are due at once, and go
   * before the process ends rather than after its next start. Whatever is still running when the time is up
   * waits for the next start (its row is still pending; at least once, like any task cut short).
   */
  async stop(graceMs = Number.POSITIVE_INFINITY): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const drained = this.drain();
    if (!Number.isFinite(graceMs)) return drained;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), graceMs)));
    const outcome = await Promise.race([drained, late]);
    clearTimeout(timer);
    if (outcome === "late") {
      this.abandoned = true;
      this.logger.log("warn", "background tasks still running at the end of the shutdown grace period; they run again at the next start", {
        running: this.inFlight.size,
      });
    }
  }

  /**
   * Runs every task due by `dueBy` (by the time of each look when not given), and waits for those in flight;
   * returns when none is left.
   */
  async drain(dueBy?: number): Promise<void> {
    for (;;) {
      this.startDue(dueBy);
      if (this.inFlight.size === 0) return;
      await Promise.race([...this.inFlight.values()].map((task) => task.settled));
    }
  }

  /**
   * Wakes the runner once the current event-loop turn is over. Tasks are
   * enqueued inside the transactions that cause them, often several per
   * request: one look for due work afterwards serves them all.
   */
  private wakeSoon(): void {
    if (this.wakePending || this.stopped) return;
    this.wakePending = true;
    setImmediate(() => {
      this.wakePending = false;
      this.wake();
    });
  }

  /** Starts due tasks now and, while the runner is on, again after each completion or every POLL_MS. */
  private wake(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    const lookAgainIn = this.startDue(this.clock.now(), true);
    this.timer = setTimeout(() => this.wake(), Math.min(POLL_MS, lookAgainIn ?? POLL_MS)).unref();
  }

  /**
   * Starts the due tasks that are not already running, up to BATCH at once.
   * Each task is settled as soon as it ends, so a slow one (a webhook waiting
   * out its timeout) holds up nothing else. Returns, for the background
   * runner, how soon it should look again when it put off a look.
   */
  private startDue(dueBy = this.clock.now(), background = false): number | undefined {
    if (this.abandoned) return undefined;
    // The head of the queue first: cheap, and all there is to it unless a place is full.
    if (!this.look(dueBy, [])) return undefined;
    // Then past the places that are full: that walks all their due rows (7 ms for 50,000), so the background
    // runner, woken by every enqueue and every completion, does it at most every FULL_PLACES_LOOK_MS and comes
    // back when that time is up.
    if (background) {
      const wait = this.lastLookPastFull + FULL_PLACES_LOOK_MS - performance.now();
      if (wait > 0) return wait;
      this.lastLookPastFull = performance.now();
    }
    const full = [...this.runningPerPlace].filter(([place, running]) => running >= this.capOf(place)).map(([place]) => place);
    this.look(dueBy, full);
    return undefined;
  }

  /** Starts the due tasks outside the places in `past`, while there is room; true when it met a full place's. */
  private look(dueBy: number, past: readonly string[]): boolean {
    const room = BATCH - this.inFlight.size;
    if (room <= 0) return false;
    let metFull = false;
    for (const due of this.dueStmt.all({ dueBy, full: JSON.stringify(past), limit: room + this.inFlight.size })) {
      if (this.inFlight.size >= BATCH) return false;
      if (this.inFlight.has(due.id)) continue;
      const places = placesOf(due.account_id, due.environment, due.lane);
      if (places.some((place) => (this.runningPerPlace.get(place) ?? 0) >= this.capOf(place))) {
        metFull = true;
        continue;
      }
      const row = this.rowStmt.get(due.id);
      if (row) this.begin(row, places);
    }
    return metFull;
  }

  /** How many tasks may take `place` at once; a lane's cap follows its failures. */
  private capOf(place: string): number {
    if (place === ALL_NETWORK) return MAX_RUNNING_NETWORK;
    if (place === ALL_LOCAL) return MAX_RUNNING_LOCAL;
    // Checked before the tenant places: a lane could be named "network".
    if (place.includes("|lane|")) return (this.failuresInARow.get(place) ?? 0) >= FAILING_STREAK ? MAX_RUNNING_PER_FAILING_LANE : MAX_RUNNING_PER_LANE;
    return place.endsWith("|local") ? MAX_RUNNING_PER_TENANT_LOCAL : MAX_RUNNING_PER_TENANT_NETWORK;
  }

  private begin(row: OutboxRow, places: string[]): void {
    let settled!: () => void;
    this.inFlight.set(row.id, { settled: new Promise<void>((resolve) => (settled = resolve)), resolve: () => settled(), places });
    for (const place of places) this.runningPerPlace.set(place, (this.runningPerPlace.get(place) ?? 0) + 1);
    void this.runOne(row).then((outcome) => {
      this.finished.push([row, outcome]);
      if (this.finished.length === 1) setImmediate(() => this.settleFinished());
    });
  }

  /** Records the outcomes of the tasks that ended during one event-loop turn in one commit. */
  private settleFinished(): void {
    // Past the shutdown grace period the database is closing: the rows stay pending, to run again.
    if (this.abandoned) return;
    const batch = this.finished;
    this.finished = [];
    try {
      this.settle(batch);
    } catch (error) {
      // The outcomes are kept and recorded at the next poll. The tasks stay in flight meanwhile, so none of them
      // runs again (a webhook POSTed again, an event fanned out again) only because its outcome was not recorded.
      this.settleFailed.failed({ error: String(error) });
      this.finished = [...batch, ...this.finished];
      setTimeout(() => this.settleFinished(), POLL_MS).unref();
      return;
    }
    for (const [row, outcome] of batch) {
      this.recordLaneOutcome(row, outcome);
      const running = this.inFlight.get(row.id);
      if (!running) continue;
      running.resolve();
      this.inFlight.delete(row.id);
      for (const place of running.places) {
        const left = (this.runningPerPlace.get(place) ?? 1) - 1;
        if (left > 0) this.runningPerPlace.set(place, left);
        else this.runningPerPlace.delete(place);
      }
    }
    // Freed room: look for more due work once this turn is over (one look serves every task that ended in it).
    this.wakeSoon();
  }

  /** A lane's failures in a row, which its cap follows: one place while it keeps failing. */
  private recordLaneOutcome(row: OutboxRow, outcome: TaskOutcome): void {
    if (row.lane === "") return;
    const place = lanePlace(row.account_id, row.environment, row.lane);
    const failures = this.failuresInARow.get(place) ?? 0;
    // Deleted first, so that the lanes failing most lately are the last the bound forgets.
    this.failuresInARow.delete(place);
    if (outcome.kind === "done") return;
    this.failuresInARow.set(place, failures + 1);
    for (const oldest of this.failuresInARow.keys()) {
      if (this.failuresInARow.size <= MAX_TRACKED_LANES) break;
      this.failuresInARow.delete(oldest);
    }
  }

  private async runOne(row: OutboxRow): Promise<TaskOutcome> {
    const payload = parsePayload(row.payload);
    // Nothing can ever run it: straight to the dead letters, where it can be seen.
    if (payload === undefined) return { kind: "dead", error: `the ${row.kind} task's payload is not JSON` };
    const task: OutboxTask = { id: row.id, kind: row.kind, tenant: tenantOf(row), payload, attempts: row.attempts, createdAt: row.created_at };
    const handler = this.handlers.get(row.kind);
    if (!handler) return { kind: "dead", error: `no handler for ${row.kind} tasks` };
    try {
      return await handler(task);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const delay = DEFAULT_BACKOFF_MS[row.attempts];
      return delay === undefined ? { kind: "dead", error: message } : { kind: "retry", at: this.clock.now() + delay, error: message };
    }
  }
}
