import { fromAuditRow, toAuditRow } from "../audit/entry.js";
import type { AuditRecord, AuditRow } from "../audit/entry.js";
import type { AuditStore } from "../audit/log.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

export interface AuditPage {
  /** Only entries with this action; undefined for all. */
  action: string | undefined;
  limit: number;
  offset: number;
}

/** The audit log in the `audit_log` table (migration 4, docs/audit-log.md). */
export class SqliteAuditStore implements AuditStore {
  private readonly lastStmt;
  private readonly insertStmt;
  private readonly allStmt;
  private readonly pageStmt;
  private readonly decisionEntryStmt;
  private readonly policyEntriesStmt;
  private readonly actionsOfStmt;
  private readonly appendTx;
  private readonly appendInTransaction;
  private readonly atomicTx;

  constructor(private readonly db: Db) {
    this.lastStmt = db.prepare<[], AuditRow>("SELECT * FROM audit_log ORDER BY seq DESC LIMIT 1");
    this.insertStmt = db.prepare<[AuditRow]>(
      `INSERT INTO audit_log (seq, id, at, account_id, environment, actor, action, subject, body, prev_hash, hash, signature)
       VALUES (@seq, @id, @at, @account_id, @environment, @actor, @action, @subject, @body, @prev_hash, @hash, @signature)`,
    );
    this.allStmt = db.prepare<[], AuditRow>("SELECT * FROM audit_log ORDER BY seq");
    // An account sees its entries in the environment asked for and its account-wide ones (environment NULL).
    this.pageStmt = db.prepare<[{ accountId: string; environment: string; action: string | null; limit: number; offset: number }], AuditRow>(
      `SELECT * FROM audit_log WHERE account_id = @accountId AND (environment = @environment OR environment IS NULL)
         AND (@action IS NULL OR action = @action)
       ORDER BY seq LIMIT @limit OFFSET @offset`,
    );
    this.decisionEntryStmt = db.prepare<[string], AuditRow>("SELECT * FROM audit_log WHERE action = 'decision.made' AND subject = ?");
    this.policyEntriesStmt = db.prepare<[], AuditRow>(
      "SELECT * FROM audit_log WHERE action IN ('policy.created', 'policy.updated', 'policy.deleted') ORDER BY seq",
    );
    this.actionsOfStmt = db.prepare<[string, string, string], { action: string; subject: string | null; body: string }>(
      "SELECT action, subject, body FROM audit_log WHERE account_id = ? AND environment = ? AND action IN (SELECT value FROM json_each(?)) ORDER BY seq",
    );
    this.appendInTransaction = (builds: ReadonlyArray<(last: AuditRecord | undefined) => AuditRecord>): AuditRecord[] => {
      const lastRow = this.lastStmt.get();
      let last = lastRow === undefined ? undefined : fromAuditRow(lastRow);
      return builds.map((build) => {
        const record = build(last);
        this.insertStmt.run(toAuditRow(record));
        last = record;
        return record;
      });
    };
    this.appendTx = db.transaction(this.appendInTransaction);
    this.atomicTx = db.transaction((work: () => unknown) => work());
  }

  /** Whether the log has no entry yet (a new data directory's). */
  isEmpty(): boolean {
    return this.lastStmt.get() === undefined;
  }

  append(build: (last: AuditRecord | undefined) => AuditRecord): AuditRecord {
    const [record] = this.appendAll([build]);
    if (!record) throw new Error("the audit append stored nothing");
    return record;
  }

  appendAll(builds: ReadonlyArray<(last: AuditRecord | undefined) => AuditRecord>): AuditRecord[] {
    // Inside a transaction, the append is part of it: if it fails, so does the
    // change it records, and the caller's transaction (or savepoint) rolls both
    // back. On its own, IMMEDIATE takes the write lock before the last entry is
    // read, so no other process can chain to the same predecessor.
    return this.db.inTransaction ? this.appendInTransaction(builds) : this.appendTx.immediate(builds);
  }

  *entries(): Iterable<AuditRecord> {
    for (const row of this.allStmt.iterate()) yield fromAuditRow(row);
  }

  atomically<T>(work: () => T): T {
    return this.atomicTx.immediate(work) as T;
  }

  /**
   * Runs `work`'s reads in one read transaction: what it reads is the database as of one moment, while
   * writers go on (WAL); a long verification holds no lock anyone waits for.
   */
  asOfOneMoment<T>(work: () => T): T {
    return this.atomicTx.deferred(work) as T;
  }

  /** Whether the decision has its decision.made entry (one per decision: a unique index). */
  hasDecisionEntry(decisionId: string): boolean {
    return this.decisionEntryStmt.get(decisionId) !== undefined;
  }

  /** A tenant's entries of these actions, oldest first, as stored (not verified). */
  actionsOf(tenant: Tenant, actions: readonly string[]): Array<{ action: string; subject: string | null; body: string }> {
    return this.actionsOfStmt.all(tenant.accountId, tenant.environment, JSON.stringify(actions));
  }

  /** Every policy change's entry, oldest first, as stored (not verified). */
  policyEntries(): AuditRecord[] {
    return this.policyEntriesStmt.all().map(fromAuditRow);
  }

  /** A decision's decision.made entry, as stored (not verified). */
  decisionEntry(decisionId: string): AuditRecord | undefined {
    const row = this.decisionEntryStmt.get(decisionId);
    return row && fromAuditRow(row);
  }

  page(tenant: Tenant, page: AuditPage): AuditRecord[] {
    return this.pageStmt
      .all({ ...tenant, action: page.action ?? null, limit: page.limit, offset: page.offset })
      .map(fromAuditRow);
  }
}
