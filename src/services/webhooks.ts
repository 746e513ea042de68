import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { WebhookEndpointSchema, WebhookService } from "../../gen/fraud/v1/webhook_pb.js";
import { apiError } from "../api/errors.js";
import type { Clock } from "../clock.js";
import type { DeliveryMethod, EndpointStatus, StoredEndpoint } from "../store/webhooks.js";
import { EndpointInputError, EndpointLimitError, type WebhookEndpoints } from "../webhooks/endpoints.js";
import type { EventType } from "../webhooks/events.js";
import { verifyWebhookSignature } from "../webhooks/signature.js";
import type { EventStream } from "../webhooks/stream.js";
import { callerScope } from "./scope.js";

function toWebhookEndpoint(stored: StoredEndpoint): MessageInitShape<typeof WebhookEndpointSchema> {
  return {
    id: stored.id,
    url: stored.url,
    events: stored.events,
    deliveryMethod: stored.deliveryMethod,
    status: stored.status,
    description: stored.description,
    secretLast4: stored.secret.slice(-4),
    createdAt: timestampFromMs(stored.createdAt),
    updatedAt: timestampFromMs(stored.updatedAt),
  };
}

function invalid(error: unknown): never {
  if (error instanceof EndpointLimitError) throw apiError("CONFLICT", error.message);
  if (error instanceof EndpointInputError) {
    throw apiError("VALIDATION_ERROR", `${error.field}: ${error.message}`, {
      fieldViolations: [{ field: error.field, description: error.message }],
    });
  }
  throw error;
}

/** Part 4.6: signature verification, and the endpoints that receive events (docs/webhooks.md). */
export function createWebhookService(deps: {
  endpoints: WebhookEndpoints;
  clock: Clock;
  /** The live stream, told when a websocket endpoint stops taking events so its clients are not left open. */
  stream: Pick<EventStream, "endpointClosed">;
}): ServiceImpl<typeof WebhookService> {
  const notFound = (id: string) => apiError("NOT_FOUND", `no webhook endpoint ${id}`);
  return {
    verifyWebhook(request) {
      return verifyWebhookSignature(request, deps.clock.now());
    },
    listWebhooks(_request, ctx) {
      const { tenant } = callerScope(ctx.values);
      return { webhooks: deps.endpoints.list(tenant).map(toWebhookEndpoint) };
    },
    async createWebhook(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      const created = await deps.endpoints
        .create(tenant, actor, {
          url: request.url,
          events: request.events as EventType[],
          deliveryMethod: (request.deliveryMethod || "http") as DeliveryMethod,
          description: request.description,
        })
        .catch(invalid);
      return { webhook: toWebhookEndpoint(created.endpoint), secret: created.secret };
    },
    getWebhook(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const stored = deps.endpoints.get(tenant, request.id);
      if (!stored) throw notFound(request.id);
      return { webhook: toWebhookEndpoint(stored) };
    },
    async updateWebhook(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      if (request.allEvents && request.events.length > 0) {
        throw apiError("VALIDATION_ERROR", "send either events or allEvents, not both", {
          fieldViolations: [{ field: "allEvents", description: "cannot be combined with events" }],
        });
      }
      const updated = await deps.endpoints
        .update(tenant, actor, request.id, {
          url: request.url,
          events: request.allEvents ? [] : request.events.length > 0 ? (request.events as EventType[]) : undefined,
          status: request.status as EndpointStatus | undefined,
          description: request.description,
        })
        .catch(invalid);
      if (!updated) throw notFound(request.id);
      if (updated.status !== "enabled") deps.stream.endpointClosed(updated.id, "the endpoint was disabled");
      return { webhook: toWebhookEndpoint(updated) };
    },
    rotateWebhookSecret(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      const rotated = deps.endpoints.rotateSecret(tenant, actor, request.id);
      if (!rotated) throw notFound(request.id);
      return { webhook: toWebhookEndpoint(rotated.endpoint), secret: rotated.secret };
    },
    deleteWebhook(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      if (!deps.endpoints.delete(tenant, actor, request.id)) throw notFound(request.id);
      deps.stream.endpointClosed(request.id, "the endpoint was deleted");
      return {};
    },
  };
}
