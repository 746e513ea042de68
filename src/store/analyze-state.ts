import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/**
 * Analyze's only persistence (part 4.2): a key-value table whose entries
 * expire. No audit trail, no decision record, no case.
 */
export class AnalyzeStateRepository {
  private readonly getStmt;
  private readonly putStmt;
  private readonly pruneStmt;

  constructor(db: Db) {
    this.getStmt = db.prepare<[string, string, string, number], { value: string }>(
      "SELECT value FROM analyze_state WHERE account_id = ? AND environment = ? AND key = ? AND expires_at > ?",
    );
    this.putStmt = db.prepare<[string, string, string, string, number]>(
      "INSERT INTO analyze_state VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
    );
    this.pruneStmt = db.prepare<[number]>("DELETE FROM analyze_state WHERE expires_at <= ?");
  }

  get<T>(tenant: Tenant, key: string, now: number): T | undefined {
    const row = this.getStmt.get(tenant.accountId, tenant.environment, key, now);
    return row && (JSON.parse(row.value) as T);
  }

  put(tenant: Tenant, key: string, value: unknown, expiresAt: number): void {
    this.putStmt.run(tenant.accountId, tenant.environment, key, JSON.stringify(value), expiresAt);
  }

  prune(now: number): number {
    return this.pruneStmt.run(now).changes;
  }
}
