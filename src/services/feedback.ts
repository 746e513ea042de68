import { setTimeout as delay } from "node:timers/promises";
import type { ServiceImpl } from "@connectrpc/connect";
import type { FeedbackService } from "../../gen/fraud/v1/feedback_pb.js";
import { apiError } from "../api/errors.js";
import { DecisionEntryPending, type FeedbackInput, type FeedbackProcessor } from "../feedback/processor.js";
import type { ActualOutcome } from "../webhooks/events.js";
import { callerScope } from "./scope.js";

/** How long feedback on a decision just made waits for the decision's signed audit entry before answering 409. */
const ENTRY_WAIT_MS = 2_000;

/** Part 4.3: ground truth about a past decision (docs/feedback.md). Input rules are the contract's. */
export function createFeedbackService(deps: {
  processor: Pick<FeedbackProcessor, "submit">;
  /** Resolves once the decision writer has stored and followed up what it was handed (or later, under load). */
  writerSettled(): Promise<void>;
  /** How long to wait for the writer at most (ENTRY_WAIT_MS; tests shorten it). */
  entryWaitMs?: number;
}): ServiceImpl<typeof FeedbackService> {
  return {
    async submitFeedback(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      const input: FeedbackInput = {
        decisionId: request.decisionId,
        evidenceId: request.evidenceId,
        userId: request.userId,
        // The contract allows only the five outcomes.
        actualOutcome: request.actualOutcome as ActualOutcome,
        confidence: request.confidence ?? 1,
        notes: request.notes,
      };
      try {
        return deps.processor.submit(tenant, actor, input);
      } catch (error) {
        if (!(error instanceof DecisionEntryPending)) throw error;
      }
      // Feedback within milliseconds of its decision: the decision's audit entry, which vouches for its
      // evidence, follows the answer. Under load the writer is never idle, so the wait is bounded too.
      const waited = new AbortController();
      await Promise.race([deps.writerSettled(), delay(deps.entryWaitMs ?? ENTRY_WAIT_MS, undefined, { signal: waited.signal }).catch(() => undefined)]);
      waited.abort();
      try {
        return deps.processor.submit(tenant, actor, input, { waitedForEntry: true });
      } catch (error) {
        if (!(error instanceof DecisionEntryPending)) throw error;
        throw apiError("CONFLICT", error.message);
      }
    },
  };
}
