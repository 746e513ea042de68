import type { DecisionRecorder } from "../decisions/recorder.js";
import type { AuditTrail } from "./log.js";

/**
 * Part 4.1's first side effect: a signed entry for every decision, appended in
 * the decide's own transaction (as a savepoint of it). The decision and its
 * entry are committed together or not at all, so a crash can lose neither
 * alone. The decide transaction already holds SQLite's write lock, which is
 * what the chain needs to read its last entry safely, and group commit spreads
 * one commit over every decision of an event-loop turn; queueing the entry in
 * the outbox instead cost an insert, a read, a delete and a second commit per
 * decision (docs/benchmarks.md).
 */
export function registerDecisionAudit(recorder: DecisionRecorder, audit: AuditTrail): void {
  recorder.addHook(({ tenant, decision, actor }) => {
    audit.record({
      ...tenant,
      // The key that asked for the decision.
      actor,
      action: "decision.made",
      subject: decision.id,
      data: {
        requestId: decision.requestId,
        evidenceId: decision.evidenceId,
        userId: decision.userId,
        action: decision.action,
        decision: decision.decision,
        score: decision.score,
        confidence: decision.confidence,
        reasons: decision.details.reasons,
      },
    });
  });
}
