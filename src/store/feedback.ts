import type { ActualOutcome } from "../webhooks/events.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/** One feedback submission as stored. */
export interface StoredFeedback {
  id: string;
  decisionId: string;
  actualOutcome: ActualOutcome;
  confidence: number;
  notes: string;
  weightsVersionBefore: number;
  weightsVersionAfter: number;
  adjustments: Record<string, number>;
  createdAt: number;
}

interface FeedbackRow {
  id: string;
  decision_id: string;
  actual_outcome: ActualOutcome;
  confidence: number;
  notes: string;
  weights_version_before: number;
  weights_version_after: number;
  adjustments: string;
  created_at: number;
}

/** Every feedback submission; a decision's latest one is its current label. */
export class FeedbackRepository {
  private readonly insertStmt;
  private readonly latestStmt;
  private readonly labelledWithStmt;
  private readonly movedWeightsStmt;

  constructor(db: Db) {
    this.insertStmt = db.prepare(
      `INSERT INTO feedback VALUES (@id, @accountId, @environment, @decisionId, @actualOutcome, @confidence, @notes,
         @weightsVersionBefore, @weightsVersionAfter, @adjustments, @createdAt)`,
    );
    // The latest is the one stored last (rows are never deleted, so rowid grows with every insert), not the one
    // with the latest time: a clock set back between two labels must not make the earlier one current again.
    this.latestStmt = db.prepare<[string, string, string, number], FeedbackRow>(
      "SELECT * FROM feedback WHERE account_id = ? AND environment = ? AND decision_id = ? AND confidence >= ? ORDER BY rowid DESC LIMIT 1",
    );
    this.labelledWithStmt = db.prepare<[string, string, string, string, number], { one: number }>(
      `SELECT 1 AS one FROM feedback WHERE account_id = ? AND environment = ? AND decision_id = ?
         AND actual_outcome IN (SELECT value FROM json_each(?)) AND confidence >= ? LIMIT 1`,
    );
    this.movedWeightsStmt = db.prepare<[string, string, string], { one: number }>(
      "SELECT 1 AS one FROM feedback WHERE account_id = ? AND environment = ? AND decision_id = ? AND weights_version_after > weights_version_before LIMIT 1",
    );
  }

  /**
   * Whether the decision was ever labelled with one of these outcomes, with at least this confidence (its
   * history, not only its current label).
   */
  everLabelled(tenant: Tenant, decisionId: string, outcomes: readonly string[], minConfidence = 0): boolean {
    return this.labelledWithStmt.get(tenant.accountId, tenant.environment, decisionId, JSON.stringify(outcomes), minConfidence) !== undefined;
  }

  /** Whether a label of the decision has moved the account's weights. */
  movedWeights(tenant: Tenant, decisionId: string): boolean {
    return this.movedWeightsStmt.get(tenant.accountId, tenant.environment, decisionId) !== undefined;
  }

  insert(tenant: Tenant, feedback: StoredFeedback): void {
    this.insertStmt.run({ ...tenant, ...feedback, adjustments: JSON.stringify(feedback.adjustments) });
  }

  /** The decision's current label; undefined when it has none. */
  latestFor(tenant: Tenant, decisionId: string, minConfidence = 0): StoredFeedback | undefined {
    const row = this.latestStmt.get(tenant.accountId, tenant.environment, decisionId, minConfidence);
    return (
      row && {
        id: row.id,
        decisionId: row.decision_id,
        actualOutcome: row.actual_outcome,
        confidence: row.confidence,
        notes: row.notes,
        weightsVersionBefore: row.weights_version_before,
        weightsVersionAfter: row.weights_version_after,
        adjustments: JSON.parse(row.adjustments) as Record<string, number>,
        createdAt: row.created_at,
      }
    );
  }
}
