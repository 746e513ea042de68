import type { ServiceImpl } from "@connectrpc/connect";
import type { ConsortiumService } from "../../gen/fraud/v1/consortium_pb.js";
import { apiError } from "../api/errors.js";
import type { Clock } from "../clock.js";
import { HASH_FORMAT, SIGNATURE_TOLERANCE_SECONDS, verifyBatch, type Indicator, type IndicatorType } from "../consortium/indicators.js";
import type { ConsortiumRepository } from "../store/consortium.js";
import { callerScope } from "./scope.js";

/**
 * The receiving side of the consortium (docs/feedback.md). The caller's key
 * (consortium:write) says who may send; the batch signature, checked with
 * the consortium key of the key's account, says the batch comes from a
 * consortium member unaltered. What is stored is the hashes, never the sender.
 */
export function createConsortiumService(deps: { consortium: ConsortiumRepository; clock: Clock }): ServiceImpl<typeof ConsortiumService> {
  return {
    submitIndicators(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const settings = deps.consortium.settings(tenant);
      if (!settings) {
        throw apiError("FORBIDDEN", "this account does not receive consortium indicators: give it a consortium key (fraudctl consortium set)");
      }
      const malformed = request.indicators.flatMap((indicator, index) =>
        HASH_FORMAT.test(indicator.hash) ? [] : [{ field: `indicators[${index}].hash`, description: "must be 64 lower-case hex characters" }],
      );
      if (malformed.length > 0) throw apiError("VALIDATION_ERROR", "indicator hashes must be hex HMAC-SHA256 digests", { fieldViolations: malformed });
      // The contract allows only the three types.
      const indicators: Indicator[] = request.indicators.map((indicator) => ({ type: indicator.type as IndicatorType, hash: indicator.hash }));
      const batch = { batchId: request.batchId, signedAt: request.signedAt, indicators };
      const now = deps.clock.now();
      const verification = verifyBatch(settings.key, batch, request.signature, now);
      if (verification === "signature_mismatch") throw apiError("UNAUTHORIZED", "the batch signature does not verify with this consortium's key");
      if (verification === "outside_tolerance") throw apiError("UNAUTHORIZED", `the batch was signed more than ${SIGNATURE_TOLERANCE_SECONDS} seconds from this server's clock`);
      // An indicator listed twice in one batch is one report: repeated, one sender would look like many.
      const distinct = [...new Map(indicators.map((indicator) => [indicator.hash, indicator])).values()];
      const stored = deps.consortium.storeBatch(tenant, request.batchId, distinct, now);
      return { accepted: stored ? distinct.length : 0, duplicate: !stored };
    },
  };
}
