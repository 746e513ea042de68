import type http from "node:http";
import { METHODS } from "node:http";
import type http2 from "node:http2";
import type net from "node:net";
import type { Duplex } from "node:stream";
import { Code, ConnectError, createContextValues, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import { getOption } from "@bufbuild/protobuf";
import { DecisionService } from "../../gen/fraud/v1/decision_pb.js";
import { http as httpRule } from "../../gen/fraud/v1/options_pb.js";
import { StatusService } from "../../gen/fraud/v1/status_pb.js";
import { withCallContext, type CallContext, type Protocol } from "../api/context.js";
import { contractOf, type MethodContract } from "../api/contract.js";
import { CLIENT_CLOSED_REQUEST, ERROR_CODE_HEADER, apiError, describeError, internalError, withServiceCode } from "../api/errors.js";
import { REQUEST_ID_HEADER, type HeaderReader } from "../api/interceptors.js";
import { bodyWithinDeadline, unwaitableDeadlineHeader } from "../api/running-calls.js";
import { newId } from "../ids.js";
import { keyHint, type Logger } from "../log.js";
import type { HealthMonitor } from "../observability/health.js";
import type { ComponentName, Metrics } from "../observability/metrics.js";
import type { ClientIpResolver } from "./client-ip.js";
import { asClientFault, connectErrorJson, withGrpcMessageEncoding } from "./library-refusal.js";
import { allowCrossOriginAnswer, allowsCrossOrigin, answerPreflight, preflightMethod } from "./cors.js";
import { errorAnswer, rawErrorAnswer, type RestGateway } from "./gateway.js";
import { dropBody, expectsContinue, unsupportedTransferCoding } from "./request-body.js";
import { requestUrl } from "./request-url.js";
import { REQUEST_TIMEOUT_ANSWER, unreadableRequest } from "./unreadable-request.js";
import { setGrpcStatus, type GrpcUnaryPath } from "./grpc-unary.js";
import type { UpgradeHandler, UpgradeOutcome } from "./listener.js";
import { EVENT_STREAM_PATH, plainRequestRefusal } from "../webhooks/stream.js";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** An upgrade handler that is given the call's context: its request id, for the answer and the log. */
export type ObservedUpgradeHandler = (req: http.IncomingMessage, socket: Duplex, head: Buffer, context: CallContext) => UpgradeOutcome | Promise<UpgradeOutcome> | undefined;

/**
 * gRPC status codes that are the server's fault, for metrics and the status
 * report, when no call context says more. DEADLINE_EXCEEDED is judged by
 * SLOW_HANDLER_MS instead.
 */
const GRPC_SERVER_FAULTS = new Set(["2", "13", "14", "15"]);

/**
 * A deadline that passed is the service's fault when its handler had held
 * the call this long: the service was slow. A shorter one is the client's
 * choice of deadline (a nanosecond is a valid one) or its slowness in sending
 * the request, and counting it would let any client, keyless, put the status
 * at outage.
 */
const SLOW_HANDLER_MS = 100;

/**
 * The single entry point of every HTTP request on the port: diagnostics,
 * RPC paths (Connect, gRPC, gRPC-Web) and the REST gateway. It gives each
 * request its id and call context, and records its metrics and access log.
 */
export class Dispatcher {
  private readonly rpcHandlers = new Map<string, UniversalHandler>();
  /** HTTP/1.1 requests received and not yet answered, per connection (pipelining). */
  private readonly pendingOnSocket = new WeakMap<object, number>();
  /** The last request Node read the headers of, per HTTP/1.1 connection: the one whose body it may fail to read. */
  private readonly lastCallOnSocket = new WeakMap<object, { req: NodeRequest; res: NodeResponse; context: CallContext }>();
  /** Unreadable requests waiting for the answers to the requests before them on their connection (refuseUnreadableRequest). */
  private readonly refusalsWaiting = new WeakMap<object, () => void>();
  /** Responses not closed yet, with their HTTP/1.1 connections: what draining waits for, and asks to end. */
  private readonly inFlight = new Map<NodeResponse, { end(): void } | undefined>();
  private draining = false;
  private idleWaiters: Array<() => void> = [];

  constructor(
    router: ConnectRouter,
    private readonly gateway: RestGateway,
    private readonly grpcUnary: GrpcUnaryPath,
    private readonly deps: {
      clientIp: ClientIpResolver;
      metrics: Metrics;
      health: HealthMonitor;
      logger: Logger;
      gauges: () => Record<string, { help: string; value: number }>;
      /** Lets a call's caller through or throws its refusal, before the message is read (interceptors.ts admitCaller). */
      admit: (contract: MethodContract, headers: HeaderReader, context: CallContext) => void;
      /** The size limit of a request's body (FRAUD_MAX_BODY_BYTES): a refused one is not read past it. */
      maxBodyBytes: number;
    },
  ) {
    for (const handler of router.handlers) this.rpcHandlers.set(handler.requestPath, handler);
  }

  readonly listener = (req: NodeRequest, res: NodeResponse): void => {
    void this.handle(req, res);
  };

  /** Resolves when no request is in flight (after draining starts). */
  idle(): Promise<void> {
    if (this.inFlight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * From now on every HTTP/1.1 answer closes its connection, those of the
   * requests already in flight too: a client told keep-alive would send its
   * next request on a connection about to close, and see it reset without
   * knowing whether that request was carried out. (HTTP/2 sessions get GOAWAY
   * from the listener.)
   */
  startDraining(): void {
    this.draining = true;
    for (const [res, connection] of this.inFlight) this.closeAfterAnswer(res, connection);
  }

  private async handle(req: NodeRequest, res: NodeResponse): Promise<void> {
    // The HTTP/1.1 connection, held here: the request lets go of it (null) once the answer is done.
    const connection = "stream" in res ? undefined : req.socket;
    if (connection && !this.admitPipelined(connection)) return;
    const url = requestUrl(req.url) ?? new URL("http://localhost/");
    const pathname = url.pathname;
    const rpc = this.rpcHandlers.get(pathname);
    const context = this.newCall(req.socket?.remoteAddress, req.headers["x-forwarded-for"], rpc ? rpcProtocol(req.headers["content-type"]) : "rest");
    if (connection) this.lastCallOnSocket.set(connection, { req, res, context });
    let route = pathname;
    let component: ComponentName | undefined;
    /** The call's gRPC status, read when the response closes (which can come before the await that wrote it returns). */
    let grpcStatus: () => string | null | undefined = () => undefined;

    this.inFlight.set(res, connection);
    res.once("close", () => {
      // Closed before its answer was delivered: the client went away (the nginx convention, 499).
      // (writableEnded rather than writableFinished: Node's HTTP/2 answer reads as finished once its stream
      // closes, whatever was written.)
      const status = res.writableEnded ? res.statusCode : (context.answeredOnConnection ?? CLIENT_CLOSED_REQUEST);
      this.observe(context, route, component, status, grpcStatus());
      this.inFlight.delete(res);
      if (connection) {
        this.pendingOnSocket.set(connection, (this.pendingOnSocket.get(connection) ?? 1) - 1);
        // Kept while its body may still fail to parse (refuseUnreadableRequest); an idle connection holds none.
        if (req.complete && this.lastCallOnSocket.get(connection)?.res === res) this.lastCallOnSocket.delete(connection);
        const refusal = this.refusalsWaiting.get(connection);
        if (refusal) {
          this.refusalsWaiting.delete(connection);
          refusal();
        }
      }
      if (this.inFlight.size === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    });
    if (this.draining) this.closeAfterAnswer(res, connection);
    // On every answer, whatever writes it: also the RPC library's own refusals, made before the interceptors
    // that add the request id to the service's answers run (a body too large, bytes that do not decode).
    res.setHeader(REQUEST_ID_HEADER, context.requestId);
    // A client that sent `Expect: 100-continue` waits with its body until told to send it (listener.ts). It is
    // told only on the paths that read the body, once the call is admitted: any other answer (a refusal, which
    // comes before) is final, and the body never comes. Such an answer closes the HTTP/1.1 connection, which
    // would otherwise read whatever the client sends next as the body it declared.
    let continueOwed = expectsContinue(req);
    if (continueOwed) this.closeAfterAnswer(res, connection);
    const letBodyCome = () => {
      if (!continueOwed) return;
      continueOwed = false;
      if (!this.draining && !res.headersSent) res.removeHeader("connection");
      res.writeContinue();
    };

    // HTTP/2 has no transfer codings (nghttp2 refuses the header).
    const transferCoding = connection ? unsupportedTransferCoding(req) : undefined;
    try {
      if (req.method === "CONNECT") {
        // Over HTTP/2 (listener.ts passes its CONNECT streams here); over HTTP/1.1 refuseTunnel answers it.
        route = "unmatched";
        this.gateway.writeError(res, context, tunnelRefusal(req.headers[":authority"]));
      } else if (connection && req.httpVersion === "1.1" && req.headers.host === undefined) {
        // Which host the client meant cannot be told (RFC 9112, 3.2: a server answers 400); Node's own check,
        // which answers a bare 400, is off so that this one answers as every refusal does (listener.ts).
        route = "unmatched";
        res.setHeader("connection", "close");
        this.gateway.writeError(res, context, apiError("VALIDATION_ERROR", "an HTTP/1.1 request must carry a Host header"));
      } else if (transferCoding !== undefined) {
        // Its body is not read: the connection closes after the answer, which is all the client gets.
        route = "unmatched";
        res.setHeader("connection", "close");
        this.gateway.writeError(res, context, apiError("NOT_IMPLEMENTED", `Transfer-Encoding ${transferCoding} is not supported: send the body with a Content-Length, or with Transfer-Encoding: chunked alone`));
      } else if (DIAGNOSTIC_PATHS.has(pathname) && req.method !== "GET" && req.method !== "HEAD") {
        res.setHeader("allow", "GET, HEAD");
        this.gateway.writeError(res, context, apiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${pathname}; use GET`));
      } else if (pathname === "/api/metrics") {
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
        res.end(this.deps.metrics.prometheus(this.deps.gauges()));
      } else if (DIAGNOSTIC_PATHS.has(pathname)) {
        this.serveHealth(pathname, res);
      } else if (rpc && req.method === "OPTIONS") {
        route = `OPTIONS ${pathname}`;
        this.serveOptions(req, res, context, pathname, ["POST"], (method) => (method === "POST" ? contractOf(rpc.method) : undefined));
      } else if (rpc && req.method !== "POST") {
        // Connect's GET form is not offered (docs/api-decisions.md): refused here, in Connect's error format,
        // with the method that is, rather than by the library's bare 405.
        route = `${methodLabel(req.method)} ${pathname}`;
        component = componentOf(rpc.service.typeName);
        this.allowCrossOrigin(req, res, contractOf(rpc.method));
        this.answerConnectError(res, context, apiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${pathname}: RPCs are called with POST`), { allow: "POST, OPTIONS" });
      } else if (rpc) {
        component = componentOf(rpc.service.typeName);
        const contract = contractOf(rpc.method);
        this.allowCrossOrigin(req, res, contract);
        const refusal = contract && this.admissionRefusal(contract, req, context);
        const unary = refusal ? undefined : this.grpcUnary.accepts(req, res, pathname);
        if (refusal) {
          await this.refuseRpc(req, res, context, refusal);
        } else if (unary) {
          letBodyCome();
          // Its failures are in the call context (the interceptors', and its own: protocolFailure).
          await this.grpcUnary.serve(unary, context, url.href);
        } else {
          letBodyCome();
          const uReq = universalRequestFromNodeRequest(req, res, undefined, withCallContext(createContextValues(), context));
          const unwaitable = unwaitableDeadlineHeader(uReq.header);
          if (unwaitable !== undefined) uReq.header.delete(unwaitable);
          let uRes = await rpc(bodyWithinDeadline(uReq));
          // Refused by the RPC library before any interceptor saw the call: bytes that did not decode, among
          // others. The client's fault, answered as such (library-refusal.ts).
          if (context.error === undefined && context.handlerStartedAt === undefined) {
            const refused = await asClientFault(uRes, rpc.method.methodKind !== "unary");
            uRes = refused.response;
            context.refusal = refused.code;
          }
          if (context.protocol === "grpc") uRes = withGrpcMessageEncoding(uRes);
          grpcStatus = () => uRes.trailer?.get("grpc-status") ?? uRes.header?.get("grpc-status");
          // An HTTP/1.1 client still sending when its answer is ready (a message over the limit, which the library
          // stopped reading) would otherwise wait, blocked in its upload, until the request timeout: the
          // connection closes after the answer, as the REST gateway's does (over HTTP/2 the stream is: listener.ts).
          if (!req.complete && !("stream" in res)) res.setHeader("connection", "close");
          await universalResponseToNodeResponse(uRes, res);
        }
      } else if (req.method === "OPTIONS") {
        const paths = this.gateway.match("OPTIONS", pathname);
        if (paths.kind === "wrong-method") {
          route = `OPTIONS ${paths.template}`;
          this.serveOptions(req, res, context, pathname, paths.allowed, (method) => {
            const found = this.gateway.match(method, pathname);
            return found.kind === "route" ? found.route.contract : undefined;
          });
        } else {
          route = "unmatched";
          this.gateway.writeError(res, context, apiError("NOT_FOUND", `no endpoint ${pathname}`));
        }
      } else {
        const match = this.gateway.match(req.method ?? "GET", pathname);
        if (match.kind === "route") {
          route = `${methodLabel(req.method)} ${match.route.template}`;
          component = componentOf(match.route.contract.method.parent.typeName);
          this.allowCrossOrigin(req, res, match.route.contract);
          const refusal = this.admissionRefusal(match.route.contract, req, context);
          if (refusal) this.gateway.refuseUnread(req, res, context, refusal);
          else {
            letBodyCome();
            await this.gateway.serve(match, req, res, context, url);
          }
        } else if (match.kind === "wrong-method") {
          // By its template, as matched routes are: a raw path would add a metric series per path a client invents.
          route = `${methodLabel(req.method)} ${match.template}`;
          // Allow names every method the path takes, OPTIONS (its preflight) included, as OPTIONS itself does.
          res.setHeader("allow", [...match.allowed, "OPTIONS"].join(", "));
          this.gateway.writeError(res, context, apiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${pathname}; use ${match.allowed.join(" or ")}`));
        } else if (isRpcCall(req)) {
          route = "unmatched";
          // Over Connect 404, as its router answers a path it does not serve; gRPC's code for it is UNIMPLEMENTED,
          // the service's NOT_FOUND, as for any unknown path.
          const unknown = new ConnectError(`no RPC method ${pathname.slice(1)} on this server (list them with server reflection)`, Code.Unimplemented, {
            [ERROR_CODE_HEADER]: "NOT_FOUND",
          });
          await this.refuseRpc(req, res, context, unknown, 404);
        } else if (pathname === EVENT_STREAM_PATH) {
          // Its upgrades never get here (listener.ts).
          route = `${methodLabel(req.method)} ${pathname}`;
          const refusal = plainRequestRefusal(req.method);
          for (const [name, value] of Object.entries(refusal.headers)) res.setHeader(name, value);
          this.gateway.writeError(res, context, apiError(refusal.code, refusal.message));
        } else {
          route = "unmatched";
          this.gateway.writeError(res, context, apiError("NOT_FOUND", `no endpoint ${req.method} ${pathname}`));
        }
      }
    } catch (error) {
      if (!res.headersSent && !rpc) {
        // A REST answer that could not be written (its message could not be encoded): a fault of the service.
        this.deps.logger.log("error", "unhandled error", { requestId: context.requestId, route, error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
        this.gateway.writeError(res, context, internalError(context.requestId, error));
        return;
      }
      // The connection broke mid-response: there is no one left to answer.
      this.deps.logger.log("warn", "response failed", { requestId: context.requestId, error: String(error) });
      if (!res.headersSent) res.writeHead(500);
      res.end();
    }
  }

  /**
   * Why an API call's caller is not let through (admitCaller), asked once for every protocol before its body
   * is read: the REST gateway then answers the refusal in its envelope, refuseRpc in the call's RPC protocol.
   * Undefined when the caller is let through; the auth interceptor then lets the call by.
   */
  private admissionRefusal(contract: MethodContract, req: NodeRequest, context: CallContext): ConnectError | undefined {
    // Node's headers as they are (lower-case names); a field Node keeps as a list reads as absent.
    const text = (name: string): string | null => {
      const value = req.headers[name.toLowerCase()];
      return typeof value === "string" ? value : null;
    };
    try {
      this.deps.admit(contract, { get: text, has: (name) => text(name) !== null }, context);
      return undefined;
    } catch (error) {
      return ConnectError.from(error);
    }
  }

  /**
   * An RPC call refused before its message is read (a method this server does not have, a caller not let
   * through) gets the error in its own protocol, which its library reads (a REST error envelope it could not):
   * gRPC and gRPC-Web as a trailers-only answer, with the status fields every gRPC path writes (setGrpcStatus),
   * Connect as its JSON error under `connectStatus` (by default the HTTP status Connect gives the code: 401 for
   * UNAUTHENTICATED). The error's metadata (the service's error code, the request id) goes with it.
   */
  private async refuseRpc(req: NodeRequest, res: NodeResponse, context: CallContext, error: ConnectError, connectStatus = codeToHttpStatus(error.code)): Promise<void> {
    context.error = withServiceCode(error);
    error.metadata.set(REQUEST_ID_HEADER, context.requestId);
    const contentType = req.headers["content-type"] ?? "";
    context.protocol = rpcProtocol(contentType);
    // What the client sends is dropped. Over HTTP/2 the answer goes at once, and the stream is closed after it
    // (listener.ts): a streaming client (buf curl's reflection on a wrong base URL, a bidi call) may never end
    // its side, and would otherwise wait for the request timeout and read a reset instead of the status. Over HTTP/1.1 the
    // message is read first: an answer before the upload's end would leave the client blocked in it.
    // A message declared, or found, over the size limit is read no further: the connection closes after the
    // answer, as after a message over the limit from a caller let through (dropBody). A body the client holds
    // back until told to send it (Expect: 100-continue) never comes: the answer goes at once, and the
    // connection closes after it (handle).
    if ("stream" in res) {
      req.resume();
    } else if (expectsContinue(req)) {
      // Nothing to read: a refusal comes before the 100 Continue.
    } else if ((await dropBody(req, this.deps.maxBodyBytes)) === "over-limit") {
      res.setHeader("connection", "close");
    }
    // Answered meanwhile: its body was one Node could not read (refuseUnreadableRequest).
    if (res.headersSent) return;
    if (contentType.startsWith("application/grpc")) {
      const fields = new Headers();
      setGrpcStatus(fields, error);
      const status = Object.fromEntries(fields);
      if (contentType.startsWith("application/grpc-web")) {
        // gRPC-Web reads no HTTP trailers, on either HTTP version: a trailers-only answer, the status in the headers.
        res.writeHead(200, { "content-type": contentType, ...status });
      } else {
        // gRPC (HTTP/2): the status in trailers, after the headers.
        res.writeHead(200, { "content-type": contentType });
        res.addTrailers(status);
      }
      res.end();
      return;
    }
    res.writeHead(connectStatus, { ...Object.fromEntries(error.metadata), "content-type": "application/json" });
    res.end(connectErrorJson(error));
  }

  /** A refusal in Connect's unary error format (connectErrorJson), with the service's error code and request id. */
  private answerConnectError(res: NodeResponse, context: CallContext, error: ConnectError, headers: Record<string, string>): void {
    context.error = error;
    const { httpStatus, code } = describeError(error);
    res.writeHead(httpStatus, { ...headers, "content-type": "application/json", [ERROR_CODE_HEADER]: code });
    res.end(connectErrorJson(error));
  }

  /** A cross-origin request to an operation browsers may call: its answer is readable by the page (cors.ts). */
  private allowCrossOrigin(req: NodeRequest, res: NodeResponse, contract: MethodContract | undefined): void {
    if (contract === undefined || !allowsCrossOrigin(contract)) return;
    // The CORS headers depend on the request's Origin: a cache must not give one answer for the other.
    res.setHeader("vary", "Origin");
    if (req.headers.origin !== undefined) allowCrossOriginAnswer(res);
  }

  /**
   * OPTIONS on a path: a CORS preflight, answered for the operations browsers
   * may call and refused (without CORS headers) for the others; else the
   * methods the path takes.
   */
  private serveOptions(
    req: NodeRequest,
    res: NodeResponse,
    context: CallContext,
    pathname: string,
    allowed: readonly string[],
    contractFor: (method: string) => MethodContract | undefined,
  ): void {
    const requested = preflightMethod(req);
    if (requested === undefined) {
      res.writeHead(204, { allow: [...allowed, "OPTIONS"].join(", ") });
      res.end();
      return;
    }
    const contract = contractFor(requested);
    if (contract === undefined) {
      res.setHeader("allow", [...allowed, "OPTIONS"].join(", "));
      this.gateway.writeError(res, context, apiError("METHOD_NOT_ALLOWED", `${requested} is not allowed on ${pathname}; use ${allowed.join(" or ")}`));
    } else if (!allowsCrossOrigin(contract)) {
      this.gateway.writeError(
        res,
        context,
        apiError(
          "FORBIDDEN",
          `a web page may call only what a publishable key may (decide, analyze) and the public status: ${contract.method.name} needs a secret key, which belongs on a server`,
        ),
      );
    } else {
      answerPreflight(res, requested);
    }
  }

  private serveHealth(pathname: string, res: NodeResponse): void {
    const { checks, ready } = this.deps.health.report();
    const live = true;
    const ok = pathname === "/api/health/live" ? live : ready;
    const body = JSON.stringify({ status: ok ? "ok" : "unavailable", live, ready, checks });
    res.writeHead(ok ? 200 : 503, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
    res.end(body);
  }

  private observe(context: CallContext, route: string, component: ComponentName | undefined, status: number, grpcStatus: string | null | undefined): void {
    if (DIAGNOSTIC_PATHS.has(route) && context.error === undefined) {
      // A probe answered "not ready" (503) reports the server's state; it is no failure of the call.
      const code = status === CLIENT_CLOSED_REQUEST ? "CANCELED" : status === 503 ? "NOT_READY" : "OK";
      this.record(context, route, component, status, code, false, false);
      return;
    }
    let code = "OK";
    let serverError = status >= 500;
    let clientError = status >= 400 && status < 500;
    // A client that left before a failure was answered: the failure is what counts (a fault stays a fault).
    if (status === CLIENT_CLOSED_REQUEST && !context.error) {
      code = "CANCELED";
    } else if (context.error) {
      const described = describeError(context.error);
      code = described.code;
      // Not a fault of the service: a feature it does not have, or a deadline it did not hold the call for long.
      serverError =
        described.httpStatus >= 500 &&
        described.code !== "NOT_IMPLEMENTED" &&
        (described.code !== "TIMEOUT" || (context.handlerStartedAt !== undefined && performance.now() - context.handlerStartedAt >= SLOW_HANDLER_MS));
      clientError = !serverError;
    } else if (context.refusal !== undefined && status !== CLIENT_CLOSED_REQUEST) {
      // Refused by the RPC library before any of the service's code ran: the request's fault, under the code
      // it was answered with (library-refusal.ts). Also for gRPC-Web, whose status is in the body.
      code = context.refusal;
      serverError = false;
      clientError = true;
    } else if (grpcStatus && grpcStatus !== "0") {
      code = `grpc_${grpcStatus}`;
      serverError = GRPC_SERVER_FAULTS.has(grpcStatus);
      clientError = !serverError;
    } else if ((serverError || clientError) && context.protocol !== "rest") {
      // A failure the interceptors never saw happened in the RPC library's reading of the request, before
      // any of the service's code ran: bytes that do not decode (connect-es answers those 500 "internal"),
      // an unknown JSON field. The request's fault, not the service's.
      code = "MALFORMED_REQUEST";
      serverError = false;
      clientError = true;
    }
    this.record(context, route, component, status, code, serverError, clientError);
  }

  /**
   * Answers what Node's HTTP/1.1 server could not take as a request (listener.ts onClientError) as the REST
   * API answers any refused call: the error envelope with its request id and fraud-error-code, and the
   * connection closes. It is logged and counted as a call, a client error, under the route "unmatched".
   * Node fails some requests after it has read their headers, on their body (a chunk size that is no
   * number): such a request is a call already, answered so under its own route, unless it was answered
   * already; then the connection is closed with nothing written (the client would read it as another
   * request's answer). When earlier requests on the connection (pipelined) still wait for their answers,
   * the refusal waits for them: they were read whole, a decide among them may already be stored, and its
   * caller must get its answer. A request not whole in time is answered 408 as Node answers it, and the
   * call whose body was being read is logged and counted with that answer.
   */
  readonly refuseUnreadableRequest = (error: NodeJS.ErrnoException, socket: net.Socket): void => {
    // Node's parser stays failed: what else the client sends fails again, and the first fault is the one answered.
    if (this.refusalsWaiting.has(socket) || socket.destroyed) return;
    const pending = this.pendingOnSocket.get(socket) ?? 0;
    const last = this.lastCallOnSocket.get(socket);
    const lastUnread = last !== undefined && !last.req.complete;
    // The request whose body failed was answered before its body was in (a refusal that did not read it).
    if (lastUnread && last.res.headersSent) {
      socket.destroy();
      return;
    }
    if (pending > (lastUnread ? 1 : 0)) {
      this.refusalsWaiting.set(socket, () => {
        if (socket.writable) this.refuseUnreadableRequest(error, socket);
        else socket.destroy();
      });
      return;
    }
    const beingRead = lastUnread ? last : undefined;
    if (error.code === "ERR_HTTP_REQUEST_TIMEOUT") {
      // Node's own answer, on the connection: the call whose body was still coming is logged and counted with
      // it (a client that did not send its request in time), not as one that went away (499).
      if (beingRead) {
        beingRead.context.answeredOnConnection = 408;
        beingRead.context.refusal = "TIMEOUT";
      }
      socket.end(REQUEST_TIMEOUT_ANSWER, () => socket.destroy());
      return;
    }
    const refusal = unreadableRequest(error.code, "reason" in error && typeof error.reason === "string" ? error.reason : undefined);
    if (beingRead) {
      // Node closes the connection once this answer is written (Connection: close): its parser is done with it.
      beingRead.res.setHeader("connection", "close");
      // This is the call's answer, whatever error it held (an RPC refusal that waited for the body, refuseRpc):
      // the log and the metrics say what the client read.
      beingRead.context.error = refusal.error;
      this.gateway.writeError(beingRead.res, beingRead.context, refusal.error);
      return;
    }
    // Destroyed once written: what else the client sends is no request Node can read.
    this.refuseOnSocket(socket, undefined, refusal.error, refusal.status);
  };

  /**
   * Answers an HTTP/1.1 CONNECT (listener.ts onConnect), which Node hands to no request listener and would
   * drop unanswered, as the service answers a CONNECT over HTTP/2: 404 in the error envelope, logged and
   * counted; the connection closes after it. Behind an earlier request still waiting for its answer, an
   * answer now would be read as that request's: the connection is dropped.
   */
  readonly refuseTunnel = (req: http.IncomingMessage, socket: net.Socket): void => {
    if ((this.pendingOnSocket.get(socket) ?? 0) > 0) {
      socket.destroy();
      return;
    }
    this.refuseOnSocket(socket, req.headers["x-forwarded-for"], tunnelRefusal(req.url));
  };

  /**
   * Answers a request no response object owns on its HTTP/1.1 connection, in the error envelope (`status`
   * in place of the error's own, if given), and ends the connection once it is written; logged and counted
   * as a client error under the route "unmatched".
   */
  private refuseOnSocket(socket: net.Socket, forwardedFor: string | string[] | undefined, error: ConnectError, status?: number): void {
    const context = this.newCall(socket.remoteAddress, forwardedFor, "rest");
    context.error = error;
    const answer = errorAnswer(context, error);
    const answered = status ?? answer.status;
    socket.end(rawErrorAnswer({ ...answer, status: answered }), () => socket.destroy());
    this.record(context, "unmatched", undefined, answered, answer.code, false, true);
  }

  /**
   * Ends an HTTP/1.1 answer's connection after it: `Connection: close` if
   * not yet sent, else once it is written, unless a pipelined request behind
   * it still waits for its answer (which says `Connection: close` itself,
   * not having been sent). `connection` is the request's own: Node lets go of
   * the answer's socket before `finish` reaches us.
   */
  private closeAfterAnswer(res: NodeResponse, connection: { end(): void } | undefined): void {
    if (connection === undefined || "stream" in res) return;
    if (!res.headersSent) res.setHeader("connection", "close");
    else res.once("finish", () => {
      if ((this.pendingOnSocket.get(connection) ?? 0) <= 1) connection.end();
    });
  }

  /**
   * Counts an HTTP/1.1 request among its connection's unanswered ones, and
   * closes the connection of a client that pipelines more than
   * MAX_PIPELINED_REQUESTS without reading the answers: each answer waits in
   * memory for the ones before it to be taken. (Browsers do not pipeline; a
   * client that does sends a few at a time.)
   */
  private admitPipelined(socket: { destroy(): void; readonly destroyed: boolean }): boolean {
    const pending = (this.pendingOnSocket.get(socket) ?? 0) + 1;
    if (pending > MAX_PIPELINED_REQUESTS) {
      // The rest of what the client sent in the same read still reaches here, one request at a time: once.
      if (!socket.destroyed) {
        this.deps.logger.log("warn", "connection closed: too many pipelined requests waiting for their answers", { pending });
        // The request's socket: a pipelined answer is attached to it only once the ones before it are written.
        socket.destroy();
      }
      return false;
    }
    // Taken back when its answer closes (handle).
    this.pendingOnSocket.set(socket, pending);
    return true;
  }

  /**
   * An upgrade handler whose requests are logged and counted as every call
   * is (protocol websocket): a stream's opening, or its refusal (a key
   * guessed at, a missing endpoint), leaves the same trace as a REST call.
   */
  observedUpgrades(handler: ObservedUpgradeHandler): UpgradeHandler {
    return (req, socket, head) => {
      const context = this.newCall(req.socket.remoteAddress, req.headers["x-forwarded-for"], "websocket");
      const outcome = handler(req, socket, head, context);
      if (outcome === undefined) return undefined;
      const route = `${methodLabel(req.method)} ${requestUrl(req.url)?.pathname ?? ""}`;
      void Promise.resolve(outcome).then(({ status, code, principal }) => {
        context.principal = principal;
        this.record(context, route, "Dashboard", status, code, status >= 500, status >= 400 && status < 500);
      });
      return outcome;
    };
  }

  /** A call's context as it arrives: its id, its start, and the client's address (its connection's, or a trusted proxy's word). */
  private newCall(remoteAddress: string | undefined, forwardedFor: string | string[] | undefined, protocol: Protocol): CallContext {
    return {
      requestId: newId("req"),
      startedAt: performance.now(),
      clientIp: this.deps.clientIp.resolve(remoteAddress, forwardedFor),
      protocol,
    };
  }

  /** One call's metrics and its `request` log line. */
  private record(context: CallContext, route: string, component: ComponentName | undefined, status: number, code: string, serverError: boolean, clientError: boolean): void {
    const durationMs = performance.now() - context.startedAt;
    const inStatusReport = serverError || (context.admitted === true && !isDiagnostic(route) && !STATUS_ROUTES.has(route));
    this.deps.metrics.observe({ route, protocol: context.protocol, code, serverError, clientError, durationMs, component, inStatusReport });
    this.deps.logger.log(serverError ? "error" : "info", "request", {
      requestId: context.requestId,
      route,
      protocol: context.protocol,
      status,
      code,
      latencyMs: Math.round(durationMs * 1000) / 1000,
      clientIp: context.clientIp,
      ...(context.decisionId !== undefined && { decisionId: context.decisionId }),
      ...(context.principal && {
        account: context.principal.accountId,
        environment: context.principal.environment,
        key: keyHint(context.principal.keyLast4),
      }),
    });
  }
}

const KNOWN_METHODS: ReadonlySet<string> = new Set(METHODS);

/**
 * A request's method as its route names it, in the metrics and the log: an HTTP/2 client may send any token
 * as its :method (HTTP/1.1's parser knows a fixed set), and a metric series per invented one would grow
 * without bound, so every method Node does not know is OTHER.
 */
function methodLabel(method: string | undefined): string {
  return method !== undefined && KNOWN_METHODS.has(method) ? method : "OTHER";
}

/** The probes' and scrapers' paths (docs/api-decisions.md, Diagnostics): GET only, no key. */
const DIAGNOSTIC_PATHS: ReadonlySet<string> = new Set(["/api/health", "/api/health/live", "/api/health/ready", "/api/metrics"]);

/**
 * Whether a call is a probe's or a tool's, not a user's: the HTTP probes and the scrape, the gRPC health
 * service (balancers' and Kubernetes' gRPC probes; a Watch lasts a minute) and server reflection (grpcurl,
 * buf curl). They are counted in the request totals, not in the status report's components or uptime.
 */
function isDiagnostic(route: string): boolean {
  return DIAGNOSTIC_PATHS.has(route) || route.startsWith("/grpc.health.v1.Health/") || route.startsWith("/grpc.reflection.");
}

/**
 * The status report's own routes, REST and RPC, as calls are labelled (read from the contract): monitors poll
 * it, and its polls must not make up its uptime.
 */
const STATUS_ROUTES: ReadonlySet<string> = (() => {
  const getStatus = StatusService.method.getStatus;
  const rest = getOption(getStatus, httpRule);
  return new Set([`${rest.method} ${rest.path}`, `/${StatusService.typeName}/${getStatus.name}`]);
})();

/** HTTP/1.1 requests one connection may have waiting for their answers; past it the connection closes. */
const MAX_PIPELINED_REQUESTS = 32;


/** Whether a request is an RPC call by its headers (the path alone may be a mistyped REST one). */
function isRpcCall(req: NodeRequest): boolean {
  const contentType = req.headers["content-type"] ?? "";
  // application/proto is Connect's alone (REST takes JSON only): an RPC call even without Connect's header.
  return (
    req.method === "POST" &&
    (contentType.startsWith("application/grpc") ||
      contentType.startsWith("application/connect+") ||
      contentType.split(";")[0]?.trim() === "application/proto" ||
      req.headers["connect-protocol-version"] !== undefined)
  );
}

function rpcProtocol(contentType: string | undefined): Protocol {
  if (contentType?.startsWith("application/grpc-web")) return "grpc-web";
  if (contentType?.startsWith("application/grpc")) return "grpc";
  return "connect";
}

function componentOf(serviceTypeName: string): ComponentName | undefined {
  if (serviceTypeName === DecisionService.typeName) return "API Node";
  return serviceTypeName.startsWith("fraud.v1.") ? "Dashboard" : undefined;
}

/** The answer to CONNECT `target` (host:port): the service is no proxy, and opens no tunnels. */
function tunnelRefusal(target: string | string[] | undefined): ConnectError {
  return apiError("NOT_FOUND", `no endpoint CONNECT ${typeof target === "string" ? target : ""}: the service opens no tunnels (it is no proxy)`);
}

