import { createContextKey, type ContextValues } from "@connectrpc/connect";
import type { ConnectError } from "@connectrpc/connect";
import type { Principal } from "../auth/key-service.js";

export type Protocol = "rest" | "connect" | "grpc" | "grpc-web" | "websocket";

/**
 * What the transport knows about one call, shared by the interceptors, the
 * handlers and the REST gateway. Created by the transport for every request.
 */
export interface CallContext {
  /** req_... identifier, echoed in responses and logs. */
  requestId: string;
  /** performance.now() when the request arrived. */
  startedAt: number;
  /** The end client's address (forwarded headers only from trusted proxies). */
  clientIp: string;
  protocol: Protocol;
  /** Set when a valid key was presented (admitCaller). */
  principal?: Principal;
  /** The dec_ id of the decision a decide or an analyze made: its log line names it, so that one leads to the other. */
  decisionId?: string;
  /** Set once the caller was let through (admitCaller): the transport asked before reading the body. */
  admitted?: true;
  /** Set when the call failed, so the REST gateway and metrics see the real error. */
  error?: ConnectError;
  /** performance.now() when the handler itself started, past the interceptors' checks (metrics: a timeout's blame). */
  handlerStartedAt?: number;
  /**
   * The RateLimit headers of a call a rate limit counted, for the error interceptor to put on the answer when
   * the handler fails with a fault of the service (an error that carries no headers of its own).
   */
  rateLimitHeaders?: Array<[string, string]>;
  /** The error code of a refusal the RPC library made before any of the service's code ran (library-refusal.ts). */
  refusal?: string | undefined;
  /**
   * The status of an answer written on the connection itself rather than through the call's response: a 408
   * for a request whose body did not come in time (dispatcher.ts refuseUnreadableRequest).
   */
  answeredOnConnection?: number;
}

const callContextKey = createContextKey<CallContext | undefined>(undefined, { description: "fraud call context" });

export function withCallContext(values: ContextValues, context: CallContext): ContextValues {
  return values.set(callContextKey, context);
}

export function callContext(values: ContextValues): CallContext {
  const context = values.get(callContextKey);
  if (!context) throw new Error("call context missing: requests must enter through the transport");
  return context;
}
