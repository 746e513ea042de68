import type { Clock } from "../clock.js";
import { newId } from "../ids.js";
import type { Outbox, OutboxTask, TaskOutcome } from "../outbox/outbox.js";
import type { ConsortiumRepository } from "../store/consortium.js";
import type { Tenant } from "../store/tenant.js";
import type { GuardOptions } from "../webhooks/address-guard.js";
import { guardedPost } from "../webhooks/http-delivery.js";
import { keyFingerprint, signBatch, type Indicator } from "./indicators.js";
import { crossedEnvironment } from "./membership.js";

/** Outbox task kind of one batch of indicators on its way to the consortium. */
export const CONSORTIUM_SHARE_TASK = "consortium.share";

/** What the outbox keeps: hashes only, never the raw values or the consortium's credentials. */
interface SharePayload {
  batchId: string;
  indicators: Indicator[];
  /** The fingerprint of the key the indicators were hashed with (keyFingerprint); absent in batches queued before it was kept. */
  keyFingerprint?: string;
}

/** Queues a batch of indicators hashed with `key` for the consortium; call inside the feedback's transaction. */
export function queueIndicators(outbox: Outbox, tenant: Tenant, indicators: Indicator[], key: string): void {
  const payload: SharePayload = { batchId: newId("cb"), indicators, keyFingerprint: keyFingerprint(key) };
  outbox.enqueue(CONSORTIUM_SHARE_TASK, tenant, payload, { lane: "consortium" });
}

/**
 * Sends queued batches: each attempt reads the account's current settings
 * (so a rotated token applies to retries and a disabled membership sends
 * nothing more; a batch hashed with a key since replaced is not sent), signs
 * the batch afresh and POSTs it. A 4xx answer other than
 * 408 and 429 will not change on retry and goes to the dead-letter queue;
 * anything else is retried on the outbox's schedule.
 */
export function registerConsortiumSharing(deps: { outbox: Outbox; consortium: ConsortiumRepository; clock: Clock; guard: GuardOptions }): void {
  deps.outbox.register(CONSORTIUM_SHARE_TASK, async (task: OutboxTask): Promise<TaskOutcome> => {
    if (!task.tenant) return { kind: "dead", error: "consortium batch without a tenant" };
    const settings = deps.consortium.settings(task.tenant);
    if (!settings || settings.shareUrl === "") return { kind: "done" };
    // A membership saved before tokens were checked against the environment (`consortium set` refuses it now).
    const crossed = crossedEnvironment(settings.shareToken, task.tenant.environment);
    if (crossed) return { kind: "dead", error: `not shared: ${crossed}; run fraudctl consortium set again with a matching token` };
    const { batchId, indicators, keyFingerprint: hashedWith } = task.payload as SharePayload;
    // Hashed with a key `consortium set` has since replaced: the hub, on the new key, could match none of it.
    if (hashedWith !== undefined && hashedWith !== keyFingerprint(settings.key)) {
      return { kind: "dead", error: "not shared: its indicators were hashed with a consortium key no longer in use (fraudctl consortium set replaced it)" };
    }
    const signedAt = Math.floor(deps.clock.now() / 1000);
    const body = JSON.stringify({ batchId, signedAt, indicators, signature: signBatch(settings.key, { batchId, signedAt, indicators }) });
    const outcome = await guardedPost(
      settings.shareUrl,
      body,
      { "Content-Type": "application/json", "X-API-Key": settings.shareToken, "User-Agent": "fraud-decision-service-consortium" },
      deps.guard,
    );
    const status = outcome.status;
    // Thrown (here and below): the outbox retries with its backoff and dead-letters after the last attempt.
    if (status === undefined) throw new Error(outcome.error ?? "no response");
    if (status >= 200 && status < 300) return { kind: "done" };
    if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
      return { kind: "dead", error: `the consortium refused the batch: HTTP ${status}` };
    }
    throw new Error(`the consortium answered HTTP ${status}`);
  });
}
