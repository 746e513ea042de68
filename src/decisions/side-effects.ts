import { CaseService, OPEN_CASE_TASK, type OpenCasePayload } from "../cases/case-service.js";
import type { EventPublisher } from "../events/publisher.js";
import type { Outbox } from "../outbox/outbox.js";
import { decisionEventType, type Decision } from "../webhooks/events.js";
import type { DecisionWriter } from "./writer.js";

/**
 * Part 4.1's asynchronous side effects of a decide, queued in the decide's own
 * transaction: the decision event for webhooks and streams, and a case for
 * elevated risk. They run after the response and survive a crash.
 */
export function registerDecisionSideEffects(writer: DecisionWriter, events: EventPublisher, outbox: Outbox): void {
  writer.addEffect(({ tenant, decision, policy }) => {
    const verdict = decision.decision as Decision;
    events.publish(tenant, decisionEventType(verdict), {
      decisionId: decision.id,
      requestId: decision.requestId,
      evidenceId: decision.evidenceId,
      userId: decision.userId,
      action: decision.action,
      decision: verdict,
      score: decision.score,
      confidence: decision.confidence,
      reasons: decision.details.reasons,
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
    if (CaseService.opensCase(decision.score) || policy.review) {
      const payload: OpenCasePayload = {
        decisionId: decision.id,
        userId: decision.userId,
        score: decision.score,
        decision: verdict,
        reasons: decision.details.reasons,
      };
      outbox.enqueue(OPEN_CASE_TASK, tenant, payload);
    }
  });
}
