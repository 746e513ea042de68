// The feedback service's wait for a fresh decision's signed audit entry, with the processor's answers scripted:
// the wait itself is what is under test (test/feedback.test.ts covers the processor's checks on a real server).
import { create } from "@bufbuild/protobuf";
import { ConnectError, createContextValues, createHandlerContext } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { FeedbackService, SubmitFeedbackRequestSchema } from "../gen/fraud/v1/feedback_pb.js";
import { withCallContext } from "../src/api/context.js";
import { describeError } from "../src/api/errors.js";
import { DecisionEntryPending, type FeedbackProcessor, type FeedbackResult } from "../src/feedback/processor.js";
import { createFeedbackService } from "../src/services/feedback.js";

const RESULT: FeedbackResult = {
  feedbackId: "fb_0000000000000000000000",
  decisionId: "dec_0000000000000000000000",
  actualOutcome: "fraud",
  weightsVersionBefore: 1,
  weightsVersionAfter: 2,
  adjustments: {},
  graphUpdated: true,
  consortiumShared: false,
  replacedPrevious: false,
};

/** A processor whose decision has its audit entry only once `written` is set; it records each attempt. */
function scriptedProcessor(): { processor: Pick<FeedbackProcessor, "submit">; attempts: boolean[]; write(): void } {
  let written = false;
  const attempts: boolean[] = [];
  return {
    attempts,
    write: () => (written = true),
    processor: {
      submit: (_tenant, _actor, _input, options) => {
        attempts.push(options?.waitedForEntry ?? false);
        if (!written) throw new DecisionEntryPending(`decision ${RESULT.decisionId} has no signed audit entry yet: it follows the decision within seconds; submit the feedback again shortly`);
        return RESULT;
      },
    },
  };
}

function submit(service: ReturnType<typeof createFeedbackService>) {
  const method = FeedbackService.method.submitFeedback;
  const context = createHandlerContext({
    service: FeedbackService,
    method,
    protocolName: "test",
    requestMethod: "POST",
    url: "http://localhost/fraud.v1.FeedbackService/SubmitFeedback",
    contextValues: withCallContext(createContextValues(), {
      requestId: "req_0000000000000000000000",
      startedAt: 0,
      clientIp: "127.0.0.1",
      protocol: "rest",
      principal: { accountId: "acct_a", environment: "live", keyId: "key_a", kind: "secret", permissions: new Set(["feedback:write"]), keyLast4: "abcd", rateLimitOverrides: {} },
    }),
  });
  const handler = service.submitFeedback;
  if (!handler) throw new Error("no submitFeedback");
  return Promise.resolve(handler(create(SubmitFeedbackRequestSchema, { decisionId: RESULT.decisionId, actualOutcome: "fraud" }), context));
}

describe("feedback on a decision whose audit entry is not written yet", () => {
  it("waits for the decision writer, then submits again, and is applied", async () => {
    const script = scriptedProcessor();
    // The writer carries out what it holds, the entry among it, and then settles.
    const service = createFeedbackService({ processor: script.processor, writerSettled: async () => script.write(), entryWaitMs: 60_000 });
    expect(await submit(service)).toEqual(RESULT);
    expect(script.attempts).toEqual([false, true]);
  });

  it("answers 409 CONFLICT, to submit again shortly, when the entry has not come within the wait", async () => {
    const script = scriptedProcessor();
    // A writer that never settles (under load it may not), and a short wait.
    const service = createFeedbackService({ processor: script.processor, writerSettled: () => new Promise(() => undefined), entryWaitMs: 20 });
    const error = await submit(service).then(
      () => undefined,
      (raw: unknown) => raw,
    );
    expect(error).toBeInstanceOf(ConnectError);
    expect(describeError(error as ConnectError)).toMatchObject({ code: "CONFLICT", httpStatus: 409 });
    expect((error as ConnectError).rawMessage).toMatch(/has no signed audit entry yet: it follows the decision within seconds; submit the feedback again shortly/);
    expect(script.attempts).toEqual([false, true]);
  });
});
