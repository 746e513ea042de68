import http from "node:http";
import type { Duplex } from "node:stream";
import { WebSocket, WebSocketServer } from "ws";
import { presentedKey } from "../api/interceptors.js";
import type { KeyService } from "../auth/key-service.js";
import type { Clock } from "../clock.js";
import type { EventPublisher } from "../events/publisher.js";
import type { Logger } from "../log.js";
import type { Tenant } from "../store/tenant.js";
import type { WebhookRepository } from "../store/webhooks.js";
import { requestUrl } from "../server/request-url.js";
import type { WebhookEvent } from "./events.js";
import { signPayload } from "./signature.js";

/** Where WebSocket clients connect (docs/webhooks.md). */
export const EVENT_STREAM_PATH = "/api/v1/events/stream";

/** Permission the connecting key must hold, as for listing endpoints. */
const STREAM_PERMISSION = "webhooks:read";

/** One message of the stream: the event body exactly as signed, with what an HTTP delivery carries in headers. */
export interface StreamMessage {
  id: string;
  type: string;
  /** Unix seconds at sending time, as in Fraud-Timestamp. */
  timestamp: string;
  /** `sha256=<hex HMAC-SHA256 of payload>` under the endpoint's secret, as in Fraud-Signature. */
  signature: string;
  /** The event's JSON body as a string: verify these bytes, then parse them. */
  payload: string;
}

/**
 * WebSocket delivery: a client with a secret key connects to
 * EVENT_STREAM_PATH?endpoint=whe_... (a websocket endpoint of its account)
 * and receives every event the endpoint subscribes to, live, signed with the
 * endpoint's own secret. Events published while no client is connected are
 * not kept for it: the stream is live, HTTP endpoints are the durable channel.
 */
export class EventStream {
  private readonly server = new WebSocketServer({ noServer: true, maxPayload: 4096 });
  /** Open connections by endpoint id (ids are unique across tenants). */
  private readonly clients = new Map<string, Set<WebSocket>>();

  constructor(
    private readonly keys: KeyService,
    private readonly endpoints: WebhookRepository,
    events: EventPublisher,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {
    events.addSink({
      // Live only: with no client connected for a subscribed endpoint, nothing is queued.
      wants: (tenant, type) => this.clients.size > 0 && this.endpoints.subscribers(tenant, "websocket", type).some((endpoint) => this.clients.has(endpoint.id)),
      deliver: (tenant, event, body) => this.broadcast(tenant, event, body),
    });
  }

  /** The listener's upgrade hook: takes the connection when it asks for the event stream, else declines. */
  readonly handleUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer): boolean => {
    const url = requestUrl(req.url);
    // Not the stream's path (or no URL at all): the HTTP/1.1 server answers it.
    if (url === undefined) return false;
    if (url.pathname !== EVENT_STREAM_PATH || req.headers.upgrade?.toLowerCase() !== "websocket") return false;
    // Keys come in headers only: a key in the query string would end up in proxy and access logs.
    const headers = new Headers();
    for (const name of ["x-api-key", "authorization"]) {
      const value = req.headers[name];
      if (typeof value === "string") headers.set(name, value);
    }
    const key = presentedKey(headers);
    const principal = key === undefined ? undefined : this.keys.authenticate(key);
    if (!principal) return refuse(socket, 401, "UNAUTHORIZED", "a valid API key is required in X-API-Key or Authorization: Bearer");
    if (!principal.permissions.has(STREAM_PERMISSION)) {
      return refuse(socket, 403, "FORBIDDEN", `the API key lacks the ${STREAM_PERMISSION} permission`);
    }
    const endpointId = url.searchParams.get("endpoint") ?? "";
    const tenant: Tenant = { accountId: principal.accountId, environment: principal.environment };
    const endpoint = this.endpoints.get(tenant, endpointId);
    if (!endpoint || endpoint.deliveryMethod !== "websocket") {
      return refuse(socket, 404, "NOT_FOUND", `no websocket endpoint "${endpointId}": pass ?endpoint=whe_... of one`);
    }
    this.server.handleUpgrade(req, socket, head, (client) => this.attach(endpoint.id, client));
    return true;
  };

  /** Closes every connection (shutdown). */
  close(): void {
    for (const sockets of this.clients.values()) for (const client of sockets) client.close(1001, "server shutting down");
    this.server.close();
  }

  private attach(endpointId: string, client: WebSocket): void {
    let sockets = this.clients.get(endpointId);
    if (!sockets) {
      sockets = new Set();
      this.clients.set(endpointId, sockets);
    }
    sockets.add(client);
    client.on("error", (error) => this.logger.log("warn", "event stream connection failed", { endpointId, error: error.message }));
    client.once("close", () => {
      sockets.delete(client);
      if (sockets.size === 0) this.clients.delete(endpointId);
    });
  }

  private broadcast(tenant: Tenant, event: WebhookEvent, body: string): void {
    if (this.clients.size === 0) return;
    for (const endpoint of this.endpoints.subscribers(tenant, "websocket", event.type)) {
      const sockets = this.clients.get(endpoint.id);
      if (!sockets) continue;
      const message: StreamMessage = {
        id: event.id,
        type: event.type,
        timestamp: String(Math.floor(this.clock.now() / 1000)),
        signature: signPayload(body, endpoint.secret),
        payload: body,
      };
      const text = JSON.stringify(message);
      for (const client of sockets) if (client.readyState === WebSocket.OPEN) client.send(text);
    }
  }
}

/** Answers a refused upgrade with the REST error shape and closes the connection. */
function refuse(socket: Duplex, status: number, code: string, message: string): true {
  const body = JSON.stringify({ success: false, error: { code, message, details: {} } });
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? code}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  return true;
}
