import type { Logger } from "../log.js";
import type { Db } from "./database.js";
import { PRUNE_STEP_ROWS, pruneInSteps } from "./prune-steps.js";
import type { Tenant } from "./tenant.js";

interface PendingPut {
  tenant: Tenant;
  key: string;
  value: string;
  expiresAt: number;
}

/** One step of the prune: WITHOUT ROWID, so the step's rows are named by their primary key. */
export const PRUNE_ANALYZE_STATE_SQL = `DELETE FROM analyze_state WHERE (account_id, environment, key) IN
  (SELECT account_id, environment, key FROM analyze_state WHERE expires_at <= ? LIMIT ${PRUNE_STEP_ROWS})`;

/** How long puts gather before their commit. */
export const ANALYZE_STATE_FLUSH_MS = 100;
/** Puts waiting at most: this many are committed without waiting for the rest of the interval. */
export const ANALYZE_STATE_MAX_PENDING = 1_000;

/**
 * Analyze's only persistence (part 4.2): a key-value table whose entries
 * expire. No audit trail, no decision record, no case. Analyze is the
 * latency-critical path and its state is best effort (nothing in the service
 * reads it back), so writes are batched: the puts of
 * {@link ANALYZE_STATE_FLUSH_MS} are committed together, a visitor's last one
 * only. A commit per event-loop turn cost analyze a tenth of its throughput;
 * what a crash can lose is the last tenth of a second's.
 */
export class AnalyzeStateRepository {
  private readonly putStmt;
  private readonly pruneStmt;
  private readonly putBatch;
  private pending = new Map<string, PendingPut>();
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(
    db: Db,
    private readonly logger: Logger,
  ) {
    this.putStmt = db.prepare<[string, string, string, string, number]>(
      "INSERT INTO analyze_state VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
    );
    this.pruneStmt = db.prepare<[number]>(PRUNE_ANALYZE_STATE_SQL);
    this.putBatch = db.transaction((puts: Iterable<PendingPut>) => {
      for (const put of puts) this.putStmt.run(put.tenant.accountId, put.tenant.environment, put.key, put.value, put.expiresAt);
    });
  }

  put(tenant: Tenant, key: string, value: unknown, expiresAt: number): void {
    // Unreferenced: a process that stops flushes on its way out (server/app.ts), and waits for nothing else.
    this.flushTimer ??= setTimeout(() => this.flushBestEffort(), ANALYZE_STATE_FLUSH_MS).unref();
    this.pending.set(pendingKey(tenant, key), { tenant, key, value: JSON.stringify(value), expiresAt });
    // Once, when the count is reached: the flush at the end of this turn takes the puts made meanwhile too.
    if (this.pending.size === ANALYZE_STATE_MAX_PENDING) setImmediate(() => this.flushBestEffort());
  }

  /** Commits the puts waiting (also called on shutdown). */
  flush(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.pending.size === 0) return;
    const puts = this.pending.values();
    this.pending = new Map();
    this.putBatch(puts);
  }

  /**
   * The timed flush runs outside any request: a failing commit (disk
   * full, I/O error) must cost the batch, which is best effort, not the process.
   */
  private flushBestEffort(): void {
    try {
      this.flush();
    } catch (error) {
      this.logger.log("warn", "could not store analyze state; the puts of the last interval are lost", { error: String(error) });
    }
  }

  /** Deletes the expired entries, a step at a time (prune-steps.ts); returns how many. */
  prune(now: number, stopped: () => boolean = () => false): Promise<number> {
    return pruneInSteps(() => this.pruneStmt.run(now).changes, stopped);
  }
}

function pendingKey(tenant: Tenant, key: string): string {
  return `${tenant.accountId}\u0000${tenant.environment}\u0000${key}`;
}
