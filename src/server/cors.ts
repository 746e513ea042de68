import type http from "node:http";
import type http2 from "node:http2";
import type { MethodContract } from "../api/contract.js";
import { PUBLISHABLE_PERMISSIONS } from "../auth/keys.js";

type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/**
 * Cross-origin calls from browsers (CORS). Browser code holds publishable keys
 * only (specification part 5), so a page on another origin may call what a
 * publishable key may call (decide, analyze) and what needs no key (the
 * public status), over REST, Connect and gRPC-Web alike, and nothing else: a
 * secret key pasted into a web page fails there too. Keys travel in headers,
 * never in cookies, so any origin may call (`*`) and no credentials are allowed.
 */
export function allowsCrossOrigin(contract: MethodContract): boolean {
  return contract.access.allowAnonymous || PUBLISHABLE_PERMISSIONS.includes(contract.permission);
}

/** What a browser may send: the key, the body's type, and what Connect and gRPC-Web clients add. */
const ALLOWED_REQUEST_HEADERS = [
  "content-type",
  "x-api-key",
  "authorization",
  "idempotency-key",
  "connect-protocol-version",
  "connect-timeout-ms",
  "grpc-timeout",
  "x-grpc-web",
  "x-user-agent",
].join(", ");

/** What a page may read of an answer besides the basic headers: the request id, limits and error codes. */
const EXPOSED_HEADERS = [
  "x-request-id",
  "ratelimit",
  "ratelimit-policy",
  "retry-after",
  "fraud-error-code",
  "grpc-status",
  "grpc-message",
  "grpc-status-details-bin",
].join(", ");

/** How long a browser may reuse a preflight's answer, in seconds (Chromium caps it at 7,200). */
const PREFLIGHT_MAX_AGE_S = 7_200;

/** Lets the page that sent this cross-origin request read its answer. */
export function allowCrossOriginAnswer(res: NodeResponse): void {
  res.setHeader("access-control-allow-origin", "*");
  res.setHeader("access-control-expose-headers", EXPOSED_HEADERS);
}

/** Answers a preflight the operation allows: the browser may then send the request itself. */
export function answerPreflight(res: NodeResponse, method: string): void {
  res.writeHead(204, {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": method,
    "access-control-allow-headers": ALLOWED_REQUEST_HEADERS,
    "access-control-max-age": String(PREFLIGHT_MAX_AGE_S),
  });
  res.end();
}

/** Whether a request is a CORS preflight: OPTIONS from a page, naming the method it means to send. */
export function preflightMethod(req: http.IncomingMessage | http2.Http2ServerRequest): string | undefined {
  const method = req.headers["access-control-request-method"];
  return req.method === "OPTIONS" && typeof req.headers.origin === "string" && typeof method === "string" ? method.toUpperCase() : undefined;
}
