import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

interface PendingPut {
  tenant: Tenant;
  key: string;
  value: string;
  expiresAt: number;
}

/**
 * Analyze's only persistence (part 4.2): a key-value table whose entries
 * expire. No audit trail, no decision record, no case. Analyze is the
 * latency-critical path and its state is best effort, so writes are batched:
 * the puts of one event-loop turn are committed together right after it.
 */
export class AnalyzeStateRepository {
  private readonly getStmt;
  private readonly putStmt;
  private readonly pruneStmt;
  private readonly putBatch;
  private pending = new Map<string, PendingPut>();

  constructor(db: Db) {
    this.getStmt = db.prepare<[string, string, string, number], { value: string }>(
      "SELECT value FROM analyze_state WHERE account_id = ? AND environment = ? AND key = ? AND expires_at > ?",
    );
    this.putStmt = db.prepare<[string, string, string, string, number]>(
      "INSERT INTO analyze_state VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
    );
    this.pruneStmt = db.prepare<[number]>("DELETE FROM analyze_state WHERE expires_at <= ?");
    this.putBatch = db.transaction((puts: Iterable<PendingPut>) => {
      for (const put of puts) this.putStmt.run(put.tenant.accountId, put.tenant.environment, put.key, put.value, put.expiresAt);
    });
  }

  get<T>(tenant: Tenant, key: string, now: number): T | undefined {
    const waiting = this.pending.get(pendingKey(tenant, key));
    if (waiting) return waiting.expiresAt > now ? (JSON.parse(waiting.value) as T) : undefined;
    const row = this.getStmt.get(tenant.accountId, tenant.environment, key, now);
    return row && (JSON.parse(row.value) as T);
  }

  put(tenant: Tenant, key: string, value: unknown, expiresAt: number): void {
    if (this.pending.size === 0) setImmediate(() => this.flush());
    this.pending.set(pendingKey(tenant, key), { tenant, key, value: JSON.stringify(value), expiresAt });
  }

  /** Commits the puts waiting for the end of the turn (also called on shutdown). */
  flush(): void {
    if (this.pending.size === 0) return;
    const puts = this.pending.values();
    this.pending = new Map();
    this.putBatch(puts);
  }

  prune(now: number): number {
    return this.pruneStmt.run(now).changes;
  }
}

function pendingKey(tenant: Tenant, key: string): string {
  return `${tenant.accountId}\u0000${tenant.environment}\u0000${key}`;
}
