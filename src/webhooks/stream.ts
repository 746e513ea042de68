import type http from "node:http";
import type { Duplex } from "node:stream";
import { WebSocket, WebSocketServer } from "ws";
import { ConnectError } from "@connectrpc/connect";
import type { CallContext } from "../api/context.js";
import { CLIENT_CLOSED_REQUEST, apiError, type ErrorCode } from "../api/errors.js";
import { authenticate, checkPermissions, presentedKey } from "../api/interceptors.js";
import { queryParameters, repeatedParameter, unknownParameter } from "../api/query-parameters.js";
import type { KeyService, Principal } from "../auth/key-service.js";
import type { Permission } from "../auth/keys.js";
import type { Clock } from "../clock.js";
import type { EventPublisher } from "../events/publisher.js";
import type { Logger } from "../log.js";
import type { Tenant } from "../store/tenant.js";
import type { WebhookRepository } from "../store/webhooks.js";
import { errorAnswer, rawErrorAnswer } from "../server/gateway.js";
import type { UpgradeOutcome } from "../server/listener.js";
import { requestUrl } from "../server/request-url.js";
import type { WebhookEvent } from "./events.js";
import { signPayload } from "./signature.js";

/** Where WebSocket clients connect (docs/webhooks.md). */
export const EVENT_STREAM_PATH = "/api/v1/events/stream";

/** Permission the connecting key must hold, as for listing endpoints. */
const STREAM_PERMISSION: Permission = "webhooks:read";
/** A client this far behind (bytes sent but not yet taken by its connection) is dropped: it is not reading. */
const MAX_BUFFERED_BYTES = 1 << 20;

/** How often connections are pinged; one that has not answered the previous ping is dropped. */
const HEARTBEAT_MS = 30_000;

/**
 * Connections one endpoint may have open at once (its handshakes under way included). Every event is sent
 * to each: without a bound, one holder of a secret key could open connections until the server's memory,
 * and its work per event, ran out. A consumer runs a few replicas, not dozens.
 */
export const MAX_STREAMS_PER_ENDPOINT = 32;

/** An open connection, with the key it connected with (checked again before every message). */
interface StreamClient {
  socket: WebSocket;
  key: string;
  /** Answered the last ping (or connected since). */
  alive: boolean;
}

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
 * The endpoint the stream's query names, read as the REST gateway reads a query: strictly decoded, no parameter
 * but `endpoint`, given once, a `whe_` id (anything else is a 400 naming it, not a 404 for an id never sent).
 */
function streamedEndpointId(search: string): string {
  const parameters = queryParameters(search);
  for (const [name, values] of parameters) {
    if (name !== "endpoint") throw unknownParameter(name);
    if (values.length > 1) throw repeatedParameter(name, values.length);
  }
  const id = parameters.get("endpoint")?.[0] ?? "";
  if (id === "") {
    throw apiError("VALIDATION_ERROR", "the query parameter endpoint is required: pass ?endpoint=whe_... of a websocket endpoint", {
      fieldViolations: [{ field: "endpoint", description: "is required" }],
    });
  }
  if (!id.startsWith("whe_")) {
    throw apiError("VALIDATION_ERROR", "query parameter endpoint must start with whe_", { fieldViolations: [{ field: "endpoint", description: "must start with whe_" }] });
  }
  return id;
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
  private readonly clients = new Map<string, Set<StreamClient>>();
  /** Handshakes under way by endpoint id: they count against MAX_STREAMS_PER_ENDPOINT as open connections do. */
  private readonly opening = new Map<string, number>();
  private readonly heartbeat: NodeJS.Timeout;
  /** Upgrades handed to ws and not yet switched: their calls, and how each is settled (ws's refusals come as wsClientError). */
  private readonly handshakes = new WeakMap<Duplex, { context: CallContext; settle: (outcome: UpgradeOutcome) => void }>();
  /** Set once shutdown has closed the stream: new upgrades are refused (503). */
  private closed = false;

  constructor(
    private readonly keys: KeyService,
    private readonly endpoints: WebhookRepository,
    events: EventPublisher,
    private readonly clock: Clock,
    private readonly logger: Logger,
    heartbeatMs = HEARTBEAT_MS,
  ) {
    // A client whose connection died without a close (a network gone, a laptop shut) stops answering pings.
    this.heartbeat = setInterval(() => this.ping(), heartbeatMs);
    this.heartbeat.unref();
    // What ws still refuses after the checks made here (a malformed subprotocol or extension header): answered
    // in the service's error shape, and logged as such. With this listener, ws leaves the answer to it.
    this.server.on("wsClientError", (error: Error, socket: Duplex) => {
      const handshake = this.handshakes.get(socket);
      this.handshakes.delete(socket);
      if (handshake) handshake.settle(refuse(socket, handshake.context, apiError("VALIDATION_ERROR", `the WebSocket handshake is invalid: ${error.message}`)));
    });
    events.addSink({
      // Live only: with no client connected for a subscribed endpoint, nothing is queued.
      wants: (tenant, type) => this.clients.size > 0 && this.endpoints.subscribers(tenant, "websocket", type).some((endpoint) => this.clients.has(endpoint.id)),
      deliver: (tenant, event, body) => this.broadcast(tenant, event, body),
    });
  }

  /** The listener's upgrade hook: takes the connection when it asks for the event stream, else declines. */
  readonly handleUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer, context: CallContext): UpgradeOutcome | Promise<UpgradeOutcome> | undefined => {
    const url = requestUrl(req.url);
    // Not the stream's path (or no URL at all): the HTTP/1.1 server answers it.
    if (url === undefined) return undefined;
    if (url.pathname !== EVENT_STREAM_PATH || req.headers.upgrade?.toLowerCase() !== "websocket") return undefined;
    // The handshake checks `ws` makes, made here first so that the refusal is the service's own, logged as
    // what it answered (ws would answer them itself, after this had already said 101).
    const handshake = handshakeProblem(req);
    if (handshake) return refuse(socket, context, apiError(handshake.code, handshake.message), undefined, handshake.headers);
    if (this.closed) return refuse(socket, context, apiError("SERVICE_UNAVAILABLE", "the server is shutting down"));
    // Keys come in headers only: a key in the query string would end up in proxy and access logs.
    const headers = new Headers();
    for (const name of ["x-api-key", "authorization"]) {
      const value = req.headers[name];
      if (typeof value === "string") headers.set(name, value);
    }
    // Authenticated as every API call is, with the same refusals.
    let principal: Principal | undefined;
    try {
      principal = authenticate(this.keys, headers, false);
      checkPermissions(principal, [STREAM_PERMISSION], "the event stream");
    } catch (error) {
      return refuse(socket, context, ConnectError.from(error), principal);
    }
    const presented = presentedKey(headers);
    // Kept to check the key again before every message (a revocation closes the stream).
    const key = presented.kind === "key" ? presented.key : "";
    let endpointId: string;
    try {
      endpointId = streamedEndpointId(url.search);
    } catch (error) {
      return refuse(socket, context, ConnectError.from(error), principal);
    }
    const tenant: Tenant = { accountId: principal.accountId, environment: principal.environment };
    const endpoint = this.endpoints.get(tenant, endpointId);
    if (!endpoint || endpoint.deliveryMethod !== "websocket") {
      return refuse(socket, context, apiError("NOT_FOUND", `no websocket endpoint ${endpointId}: pass ?endpoint=whe_... of one`), principal);
    }
    if (endpoint.status !== "enabled") {
      return refuse(socket, context, apiError("CONFLICT", `the websocket endpoint ${endpoint.id} is disabled: enable it to stream its events`), principal);
    }
    const open = (this.clients.get(endpoint.id)?.size ?? 0) + (this.opening.get(endpoint.id) ?? 0);
    if (open >= MAX_STREAMS_PER_ENDPOINT) {
      return refuse(
        socket,
        context,
        apiError("CONFLICT", `the websocket endpoint ${endpoint.id} has ${MAX_STREAMS_PER_ENDPOINT} connections open, the most allowed: close one, or stream through another endpoint`),
        principal,
      );
    }
    this.opening.set(endpoint.id, (this.opening.get(endpoint.id) ?? 0) + 1);
    let counted = true;
    // Once, however the handshake ends (switched, refused by ws, or the client gone).
    const opened = () => {
      if (!counted) return;
      counted = false;
      const left = (this.opening.get(endpoint.id) ?? 1) - 1;
      if (left > 0) this.opening.set(endpoint.id, left);
      else this.opening.delete(endpoint.id);
    };
    // Settled when ws has switched protocols, or refused what it checks beyond the above (a malformed
    // subprotocol or extension header: wsClientError), or the client left first.
    return new Promise<UpgradeOutcome>((resolve) => {
      const left = () => {
        opened();
        resolve({ status: CLIENT_CLOSED_REQUEST, code: "CANCELED", principal });
      };
      socket.once("close", left);
      this.handshakes.set(socket, {
        context,
        settle: (outcome) => {
          socket.off("close", left);
          opened();
          resolve({ ...outcome, principal });
        },
      });
      this.server.handleUpgrade(req, socket, head, (client) => {
        this.handshakes.get(socket)?.settle({ status: 101, code: "OK" });
        this.handshakes.delete(socket);
        this.attach(endpoint.id, { socket: client, key, alive: true });
      });
    });
  };

  /** Closes the connections of an endpoint that no longer takes events (deleted or disabled), saying why. */
  endpointClosed(endpointId: string, reason: string): void {
    for (const client of this.clients.get(endpointId) ?? []) client.socket.close(1008, reason);
  }

  /** Closes every connection (shutdown). */
  close(): void {
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const clients of this.clients.values()) for (const client of clients) client.socket.close(1001, "server shutting down");
    this.server.close();
  }

  private attach(endpointId: string, client: StreamClient): void {
    let clients = this.clients.get(endpointId);
    if (!clients) {
      clients = new Set();
      this.clients.set(endpointId, clients);
    }
    clients.add(client);
    const { socket } = client;
    socket.on("pong", () => (client.alive = true));
    // Every ping the client sends queues a pong for it: one that sends pings and never reads would make the
    // server hold its pongs without end. It gets the same limit as the events it does not read.
    socket.on("ping", () => {
      if (socket.bufferedAmount > MAX_BUFFERED_BYTES) this.drop(client, endpointId);
    });
    socket.on("error", (error) => this.logger.log("warn", "event stream connection failed", { endpointId, error: error.message }));
    socket.once("close", () => {
      clients.delete(client);
      if (clients.size === 0) this.clients.delete(endpointId);
    });
  }

  private ping(): void {
    for (const clients of this.clients.values()) {
      for (const client of clients) {
        if (!client.alive) {
          client.socket.terminate();
          continue;
        }
        client.alive = false;
        client.socket.ping();
      }
    }
  }

  /** Whether the client may be sent an event now; closes it when not (a revoked key, or a client not reading). */
  private stillServed(client: StreamClient, endpointId: string): boolean {
    // From the key cache, which a revocation clears at once: as immediate as on every other protocol.
    if (!this.keys.authenticate(client.key)?.permissions.has(STREAM_PERMISSION)) {
      client.socket.close(1008, "the API key is no longer valid");
      return false;
    }
    if (client.socket.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.drop(client, endpointId);
      return false;
    }
    return true;
  }

  /** Ends the connection of a client that does not read what it is sent (once: the rest of a burst of pings finds it ending). */
  private drop(client: StreamClient, endpointId: string): void {
    if (client.socket.readyState !== WebSocket.OPEN) return;
    this.logger.log("warn", "event stream client dropped: it is not reading its events", { endpointId, buffered: client.socket.bufferedAmount });
    client.socket.terminate();
  }

  private broadcast(tenant: Tenant, event: WebhookEvent, body: string): void {
    if (this.clients.size === 0) return;
    for (const endpoint of this.endpoints.subscribers(tenant, "websocket", event.type)) {
      const clients = this.clients.get(endpoint.id);
      if (!clients) continue;
      const message: StreamMessage = {
        id: event.id,
        type: event.type,
        timestamp: String(Math.floor(this.clock.now() / 1000)),
        signature: signPayload(body, endpoint.secret),
        payload: body,
      };
      const text = JSON.stringify(message);
      for (const client of clients) {
        if (client.socket.readyState === WebSocket.OPEN && this.stillServed(client, endpoint.id)) client.socket.send(text);
      }
    }
  }
}

/** A refusal of a request to the stream's path: its code, message and the headers it needs. */
interface StreamRefusal {
  code: ErrorCode;
  message: string;
  headers: Record<string, string>;
}

const NOT_A_GET: StreamRefusal = { code: "METHOD_NOT_ALLOWED", message: "the event stream's handshake is a GET", headers: { Allow: "GET" } };

/**
 * What a plain request to the stream's path (no Upgrade: someone trying it with curl, say) is answered: the
 * HTTP server gives it to the dispatcher, not to {@link EventStream.handleUpgrade}.
 */
export function plainRequestRefusal(method: string | undefined): StreamRefusal {
  if (method !== "GET") return NOT_A_GET;
  return {
    code: "VALIDATION_ERROR",
    message: `${EVENT_STREAM_PATH} takes WebSocket connections only: the request needs the headers Connection: Upgrade and Upgrade: websocket (docs/webhooks.md)`,
    headers: {},
  };
}

/** A WebSocket handshake that ws would refuse, checked as it checks (RFC 6455 section 4.2.1). */
function handshakeProblem(req: http.IncomingMessage): StreamRefusal | undefined {
  if (req.method !== "GET") return NOT_A_GET;
  const key = req.headers["sec-websocket-key"];
  if (typeof key !== "string" || !/^[+/0-9A-Za-z]{22}==$/.test(key)) {
    return { code: "VALIDATION_ERROR", message: "Sec-WebSocket-Key must be 16 bytes in base64", headers: {} };
  }
  const version = req.headers["sec-websocket-version"];
  if (version !== "13" && version !== "8") {
    // The versions served, so that the client can try one (RFC 6455 section 4.4).
    return { code: "VALIDATION_ERROR", message: "Sec-WebSocket-Version must be 13 (or 8)", headers: { "Sec-WebSocket-Version": "13, 8" } };
  }
  return undefined;
}

/**
 * Answers a refused upgrade as the REST API answers any refused call (its status, request id and error
 * envelope: gateway.ts errorAnswer), on the raw connection the upgrade came on, and closes it.
 */
function refuse(socket: Duplex, context: CallContext, error: ConnectError, principal?: Principal, headers: Record<string, string> = {}): UpgradeOutcome {
  context.error ??= error;
  const answer = errorAnswer(context, error);
  socket.end(rawErrorAnswer(answer, headers));
  return { status: answer.status, code: answer.code, principal };
}
