import { caseSummary, openedCase } from "../cases/case-service.js";
import type { EventPublisher } from "../events/publisher.js";
import { decisionEventType, type Decision } from "../webhooks/events.js";
import { decisionSummary } from "./record.js";
import type { DecisionWriter } from "./writer.js";

/**
 * Part 4.1's asynchronous side effects of a decide: the events for webhooks
 * and streams. The decision's and the matched policy rules' are queued in the
 * decide's own transaction, the opened case's with the case (follow-up.ts).
 * They are dispatched after the response and survive a crash.
 */
export function registerDecisionSideEffects(writer: DecisionWriter, events: EventPublisher): void {
  writer.addEffect(({ tenant, decision, policy }) => {
    const verdict = decision.decision as Decision;
    events.publish(tenant, decisionEventType(verdict), {
      decisionId: decision.id,
      ...decisionSummary(decision),
      decision: verdict,
      ...(policy.decidedBy !== undefined && { policyId: policy.decidedBy }),
      shadowResults: policy.shadowResults,
    });
    for (const triggered of policy.triggered) {
      events.publish(tenant, "policy.triggered", {
        ...triggered,
        decisionId: decision.id,
        requestId: decision.requestId,
        userId: decision.userId,
        action: decision.action,
        score: decision.score,
      });
    }
  });
  // Stored with the case, within milliseconds of the decision's answer (follow-up.ts).
  writer.addCaseEffect(({ tenant, openCase, now }) => {
    if (openCase) events.publish(tenant, "case.created", { case: caseSummary(openedCase(openCase, now)) });
  });
}
