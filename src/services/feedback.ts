import type { ServiceImpl } from "@connectrpc/connect";
import type { FeedbackService } from "../../gen/fraud/v1/feedback_pb.js";
import type { FeedbackProcessor } from "../feedback/processor.js";
import type { ActualOutcome } from "../webhooks/events.js";
import { callerScope } from "./scope.js";

/** Part 4.3: ground truth about a past decision (docs/feedback.md). Input rules are the contract's. */
export function createFeedbackService(deps: { processor: FeedbackProcessor }): ServiceImpl<typeof FeedbackService> {
  return {
    submitFeedback(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      return deps.processor.submit(tenant, actor, {
        decisionId: request.decisionId,
        evidenceId: request.evidenceId,
        userId: request.userId,
        // The contract allows only the five outcomes.
        actualOutcome: request.actualOutcome as ActualOutcome,
        confidence: request.confidence ?? 1,
        notes: request.notes,
      });
    },
  };
}
