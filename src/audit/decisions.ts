import type { StoredDecision } from "../store/decisions.js";
import type { Tenant } from "../store/tenant.js";
import { decisionSummary, type DecisionDetails } from "../decisions/record.js";
import type { AuditActor, AuditFields } from "./entry.js";

/**
 * Part 4.1's first side effect: a signed entry for every decision, written
 * within milliseconds of its answer as part of the decision's follow-up
 * (decisions/follow-up.ts), which the decision writer carries out for a whole
 * batch in one transaction.
 */
export function decisionAuditFields(write: { tenant: Tenant; actor: AuditActor; decision: StoredDecision<DecisionDetails> }): AuditFields & { subject: string } {
  const { tenant, actor, decision } = write;
  return {
    ...tenant,
    // The key that asked for the decision.
    actor,
    action: "decision.made",
    subject: decision.id,
    data: decisionSummary(decision),
  };
}
