import type { CasePriority, CaseStatus } from "../cases/lifecycle.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

export interface CaseNote {
  text: string;
  createdAt: number;
}

export interface StoredCase {
  id: string;
  decisionId: string;
  userId: string;
  status: CaseStatus;
  priority: CasePriority;
  score: number;
  decision: string;
  reasons: string[];
  assignee: string;
  notes: CaseNote[];
  createdAt: number;
  updatedAt: number;
}

/** A case a decision opens: what the decision writer stores as the decision's follow-up (decisions/follow-up.ts). */
export type NewCase = Pick<StoredCase, "id" | "decisionId" | "userId" | "priority" | "score" | "decision" | "reasons">;

interface CaseRow {
  id: string;
  decision_id: string;
  user_id: string;
  status: CaseStatus;
  priority: CasePriority;
  score: number;
  decision: string;
  reasons: string;
  assignee: string;
  notes: string;
  created_at: number;
  updated_at: number;
}

function toCase(row: CaseRow): StoredCase {
  return {
    id: row.id,
    decisionId: row.decision_id,
    userId: row.user_id,
    status: row.status,
    priority: row.priority,
    score: row.score,
    decision: row.decision,
    reasons: JSON.parse(row.reasons) as string[],
    assignee: row.assignee,
    notes: JSON.parse(row.notes) as CaseNote[],
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export interface CaseFilter {
  status?: CaseStatus;
  priority?: CasePriority;
  limit: number;
  offset: number;
}

/** Fraud cases, scoped by account and environment like every tenant table. */
export class CaseRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly listStmt;
  private readonly updateStmt;

  constructor(db: Db) {
    this.insertStmt = db.prepare(
      `INSERT OR IGNORE INTO cases (id, account_id, environment, decision_id, user_id, status, priority, score, decision, reasons, created_at, updated_at)
       VALUES (@id, @accountId, @environment, @decisionId, @userId, 'open', @priority, @score, @decision, @reasons, @now, @now)`,
    );
    this.getStmt = db.prepare<[string, string, string], CaseRow>("SELECT * FROM cases WHERE id = ? AND account_id = ? AND environment = ?");
    // NULL filters match everything, so one prepared statement serves every combination.
    this.listStmt = db.prepare<[{ accountId: string; environment: string; status: string | null; priority: string | null; limit: number; offset: number }], CaseRow>(
      `SELECT * FROM cases WHERE account_id = @accountId AND environment = @environment
         AND (@status IS NULL OR status = @status) AND (@priority IS NULL OR priority = @priority)
       ORDER BY created_at DESC, id DESC LIMIT @limit OFFSET @offset`,
    );
    this.updateStmt = db.prepare(
      `UPDATE cases SET status = @status, assignee = @assignee, notes = @notes, updated_at = @updatedAt
       WHERE id = @id AND account_id = @accountId AND environment = @environment`,
    );
  }

  /** Opens the case of a decision; false when that decision already has one. */
  open(tenant: Tenant, fields: NewCase, now: number): boolean {
    return (
      this.insertStmt.run({ ...tenant, ...fields, reasons: JSON.stringify(fields.reasons), now }).changes === 1
    );
  }

  get(tenant: Tenant, id: string): StoredCase | undefined {
    const row = this.getStmt.get(id, tenant.accountId, tenant.environment);
    return row && toCase(row);
  }

  list(tenant: Tenant, filter: CaseFilter): StoredCase[] {
    return this.listStmt
      .all({ ...tenant, status: filter.status ?? null, priority: filter.priority ?? null, limit: filter.limit, offset: filter.offset })
      .map(toCase);
  }

  save(tenant: Tenant, updated: StoredCase): void {
    this.updateStmt.run({
      ...tenant,
      id: updated.id,
      status: updated.status,
      assignee: updated.assignee,
      notes: JSON.stringify(updated.notes),
      updatedAt: updated.updatedAt,
    });
  }
}
