import type { StoredDecision } from "../store/decisions.js";
import type { Tenant } from "../store/tenant.js";
import { decisionSummary, type DecisionDetails } from "../decisions/record.js";
import type { AuditActor, AuditFields } from "./entry.js";

/**
 * Part 4.1's first side effect: a signed entry for every decision, written
 * within milliseconds of its answer as part of the decision's follow-up
 * (decisions/follow-up.ts), which the decision writer carries out for a whole
 * batch in one transaction. It records the evidence's integrity hash: signed
 * and chained here, it proves the evidence unaltered to feedback even against
 * someone who can rewrite the database (but not sign).
 */
export function decisionAuditFields(
  write: { tenant: Tenant; actor: AuditActor; decision: StoredDecision<DecisionDetails> },
  evidenceIntegrityHash: string,
): AuditFields & { subject: string } {
  const { tenant, actor, decision } = write;
  return {
    ...tenant,
    // The key that asked for the decision.
    actor,
    action: "decision.made",
    subject: decision.id,
    data: { ...decisionSummary(decision), evidenceIntegrityHash },
  };
}
