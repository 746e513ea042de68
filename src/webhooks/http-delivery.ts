import http from "node:http";
import https from "node:https";
import type { Clock } from "../clock.js";
import type { EventPublisher } from "../events/publisher.js";
import type { Logger } from "../log.js";
import type { Outbox, OutboxTask, TaskOutcome } from "../outbox/outbox.js";
import type { Db } from "../store/database.js";
import type { Tenant } from "../store/tenant.js";
import type { WebhookRepository } from "../store/webhooks.js";
import { BlockedAddressError, guardWebhookRequest, type GuardOptions } from "./address-guard.js";
import { ATTEMPT_TIMEOUT_MS, nextAttempt, type AttemptOutcome } from "./delivery-policy.js";
import type { WebhookEndpoints } from "./endpoints.js";
import type { EventType, WebhookEvent } from "./events.js";
import { deliveryHeaders } from "./signature.js";

/** Outbox task kind of one event's delivery to one http endpoint. */
export const DELIVERY_TASK = "webhook.delivery";

/** What a delivery task carries: never the secret, which is read at each attempt (rotation applies to retries). */
export interface DeliveryPayload {
  endpointId: string;
  eventId: string;
  eventType: EventType;
  /** The event body exactly as published: every attempt sends and signs these bytes. */
  body: string;
}

export interface HttpDeliveryDeps {
  db: Db;
  repository: WebhookRepository;
  endpoints: WebhookEndpoints;
  outbox: Outbox;
  events: EventPublisher;
  clock: Clock;
  logger: Logger;
  guard: GuardOptions;
  /** Jitter source for the retry schedule (delivery-policy.ts). */
  random: () => number;
}

/**
 * HTTP delivery (docs/webhooks.md): each published event becomes one outbox
 * task per subscribed http endpoint, and each task POSTs the signed body,
 * retrying on the delivery policy's schedule. Deliveries that fail for good
 * stay in the outbox as dead letters, like every other background task.
 */
export function registerHttpDelivery(deps: HttpDeliveryDeps): void {
  const { repository, outbox, clock } = deps;
  // One transaction for all of an event's deliveries: a crash queues all of them or none.
  const fanOut = deps.db.transaction((tenant: Tenant, event: WebhookEvent, body: string) => {
    for (const endpoint of repository.subscribers(tenant, "http", event.type)) {
      const payload: DeliveryPayload = { endpointId: endpoint.id, eventId: event.id, eventType: event.type, body };
      // Each endpoint its own lane: one that does not answer holds a few running places, not its account's.
      outbox.enqueue(DELIVERY_TASK, tenant, payload, { lane: endpoint.id });
    }
  });
  deps.events.addSink({
    wants: (tenant, type) => repository.subscribers(tenant, "http", type).length > 0,
    deliver: (tenant, event, body) => {
      fanOut.immediate(tenant, event, body);
    },
  });

  outbox.register(DELIVERY_TASK, async (task: OutboxTask): Promise<TaskOutcome> => {
    if (!task.tenant) return { kind: "dead", error: "delivery without a tenant" };
    const delivery = task.payload as DeliveryPayload;
    const endpoint = repository.get(task.tenant, delivery.endpointId);
    // A deleted endpoint wants nothing more; a disabled one keeps its deliveries for a replay after re-enabling.
    if (!endpoint) return { kind: "done" };
    if (endpoint.status === "disabled") return { kind: "dead", error: "the endpoint is disabled" };

    const headers = deliveryHeaders(delivery.body, endpoint.secret, { id: delivery.eventId, type: delivery.eventType }, clock.now() / 1000);
    const outcome = await guardedPost(endpoint.url, delivery.body, { ...headers, "User-Agent": "fraud-decision-service-webhooks" }, deps.guard);
    const step = nextAttempt(task.attempts + 1, outcome, clock.now(), { random: deps.random });
    const observed = outcome.status !== undefined ? `HTTP ${outcome.status}` : (outcome.error ?? "no response");
    switch (step.kind) {
      case "delivered":
        return { kind: "done" };
      case "retry":
        return { kind: "retry", at: step.at, error: observed };
      case "dead-letter":
        return { kind: "dead", error: `${step.reason}: ${step.detail}` };
      case "disable-endpoint": {
        const gone = deps.endpoints.disableGone(task.tenant, endpoint);
        // Deleted meanwhile: like any delivery of a deleted endpoint, it ends here.
        if (gone === "deleted") return { kind: "done" };
        if (gone === "changed") return { kind: "retry", at: clock.now(), error: `HTTP 410 from ${endpoint.url}, before the endpoint was changed` };
        if (gone === "disabled") deps.logger.log("warn", "webhook endpoint answered 410 Gone and was disabled", { endpointId: endpoint.id });
        return { kind: "dead", error: "HTTP 410: the endpoint is gone and was disabled" };
      }
    }
  });
}

/**
 * One POST, guarded against private destinations at connection time, with no
 * redirects followed and a deadline on the whole attempt. The answer is judged
 * by its status line; its body is not read. Webhook deliveries and consortium
 * shares (consortium/sharing.ts) both go out through it.
 */
export function guardedPost(url: string, body: string, headers: Record<string, string>, guard: GuardOptions): Promise<AttemptOutcome> {
  const checked = guardWebhookRequest(url, guard);
  if (!checked.ok) return Promise.resolve({ error: `address_blocked: ${checked.problem.message}` });
  const target = new URL(url);
  const send = target.protocol === "https:" ? https.request : http.request;
  return new Promise((resolve) => {
    const request = send(
      target,
      {
        method: "POST",
        headers: { ...headers, "Content-Length": String(Buffer.byteLength(body)) },
        lookup: checked.lookup,
        // A fresh connection per attempt: nothing pooled outlives the address check.
        agent: false,
      },
      (response) => {
        clearTimeout(deadline);
        const retryAfter = response.headers["retry-after"];
        resolve({ status: response.statusCode, retryAfterHeader: retryAfter });
        response.destroy();
      },
    );
    const deadline = setTimeout(() => {
      request.destroy();
      resolve({ error: "timeout" });
    }, ATTEMPT_TIMEOUT_MS);
    // An attempt never keeps the process alive: one still running when shutdown's grace period ends is
    // abandoned (and runs again at the next start) instead of holding the stopped service for its timeout.
    deadline.unref();
    request.on("socket", (socket) => socket.unref());
    request.on("error", (error: NodeJS.ErrnoException) => {
      clearTimeout(deadline);
      resolve({ error: connectionError(error) });
    });
    request.end(body);
  });
}

function connectionError(error: NodeJS.ErrnoException): string {
  if (error instanceof BlockedAddressError) return `address_blocked: ${error.message}`;
  if (error.code === "ECONNREFUSED") return "connection_refused";
  if (error.code === "ENOTFOUND") return "unresolvable_host";
  return error.code ?? error.message;
}
