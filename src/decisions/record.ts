import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { Contribution } from "../engine/index.js";
import type { StoredDecision } from "../store/decisions.js";

/** The fields of a decision's stored request (its evidence's `request`: the protobuf JSON of DecideRequest) that are read back. */
export interface StoredRequest {
  userId?: string;
  action?: string;
  email?: string;
  ip?: string;
  deviceId?: string;
  amount?: number;
  currency?: string;
  metadata?: JsonObject;
}

/** One policy's outcome on one decision, as stored and shown in GetDecision. */
export interface PolicyResultRecord {
  policyId: string;
  policyVersion: number;
  mode: "active" | "shadow";
  matchedRule: number;
  action: string;
  error: string;
}

/**
 * How a decision was made, stored as JSON with the decision row. The signals
 * themselves are stored once, in the evidence record.
 */
export interface DecisionDetails {
  /** The DecideRequest in protobuf JSON, with the IP as resolved. */
  request: JsonValue;
  reasons: string[];
  confidencePercent: number;
  categoryScores: Record<string, number>;
  contributions: Contribution[];
  weightsVersion: number;
  policyResults: PolicyResultRecord[];
  signalCoverage: "full" | "partial";
  fastPathMs: number;
  comprehensivePathMs: number;
  processingTimeMs: number;
  /** When the comprehensive path missed its budget: what it said once it finished. */
  lateComprehensive?: { score: number; reasons: string[]; comprehensivePathMs: number } | { failed: true };
}

/** What a decision's audit entry and its decision.* event both say of it. */
export function decisionSummary(decision: StoredDecision<DecisionDetails>) {
  return {
    requestId: decision.requestId,
    evidenceId: decision.evidenceId,
    userId: decision.userId,
    action: decision.action,
    decision: decision.decision,
    score: decision.score,
    confidence: decision.confidence,
    reasons: decision.details.reasons,
  };
}
