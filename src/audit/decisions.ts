import type { StoredDecision } from "../store/decisions.js";
import type { Tenant } from "../store/tenant.js";
import type { DecisionDetails } from "../decisions/record.js";
import type { AuditActor, AuditFields } from "./entry.js";

/**
 * Part 4.1's first side effect: a signed entry for every decision, appended in
 * the decide's own transaction (decisions/decision-store.ts), so the decision
 * and its entry are committed together or not at all and a crash can lose
 * neither alone. The decide transaction already holds SQLite's write lock,
 * which is what the chain needs to read its last entry safely, and group
 * commit spreads one commit over every decision of a batch; queueing the entry
 * in the outbox instead cost an insert, a read, a delete and a second commit
 * per decision (docs/benchmarks.md).
 */
export function decisionAuditFields(write: { tenant: Tenant; actor: AuditActor; decision: StoredDecision<DecisionDetails> }): AuditFields {
  const { tenant, actor, decision } = write;
  return {
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
  };
}
