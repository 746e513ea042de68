import type { Db } from "./database.js";
import { PRUNE_STEP_ROWS, pruneInSteps } from "./prune-steps.js";
import type { Tenant } from "./tenant.js";

/** How long a decide answer is replayed for the same Idempotency-Key. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

export interface IdempotentResponse {
  requestHash: string;
  response: Uint8Array;
}

/** One step of the prune, through idempotency_keys_by_time. */
export const PRUNE_IDEMPOTENCY_SQL = `DELETE FROM idempotency_keys WHERE rowid IN
  (SELECT rowid FROM idempotency_keys WHERE created_at <= ? LIMIT ${PRUNE_STEP_ROWS})`;

/** Stored answers to decide calls that carried an Idempotency-Key. */
export class IdempotencyRepository {
  private readonly getStmt;
  private readonly insertStmt;
  private readonly pruneStmt;

  constructor(db: Db) {
    this.getStmt = db.prepare<[string, string, string, number], { request_hash: string; response: Buffer }>(
      "SELECT request_hash, response FROM idempotency_keys WHERE account_id = ? AND environment = ? AND key = ? AND created_at > ?",
    );
    this.insertStmt = db.prepare<[string, string, string, string, Uint8Array, number]>(
      `INSERT INTO idempotency_keys VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT DO UPDATE SET request_hash = excluded.request_hash, response = excluded.response, created_at = excluded.created_at
       WHERE idempotency_keys.created_at <= excluded.created_at - ${IDEMPOTENCY_TTL_MS}`,
    );
    this.pruneStmt = db.prepare<[number]>(PRUNE_IDEMPOTENCY_SQL);
  }

  find(tenant: Tenant, key: string, now: number): IdempotentResponse | undefined {
    const row = this.getStmt.get(tenant.accountId, tenant.environment, key, now - IDEMPOTENCY_TTL_MS);
    return row && { requestHash: row.request_hash, response: row.response };
  }

  /**
   * Claims the key for this answer. False when a live answer for the key was
   * stored first (a concurrent retry won): the caller must roll back and replay it.
   */
  claim(tenant: Tenant, key: string, entry: IdempotentResponse, now: number): boolean {
    return this.insertStmt.run(tenant.accountId, tenant.environment, key, entry.requestHash, entry.response, now).changes === 1;
  }

  /** Deletes the answers past IDEMPOTENCY_TTL_MS, a step at a time (prune-steps.ts); returns how many. */
  prune(now: number, stopped: () => boolean = () => false): Promise<number> {
    return pruneInSteps(() => this.pruneStmt.run(now - IDEMPOTENCY_TTL_MS).changes, stopped);
  }
}
