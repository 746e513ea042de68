import type http from "node:http";
import http2 from "node:http2";
import { fromBinary, toBinary, type DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import {
  contentTypeProto,
  grpcStatusOk,
  headerEncoding,
  headerGrpcMessage,
  headerGrpcStatus,
  headerTimeout,
  parseTimeout,
  setTrailerStatus,
} from "@connectrpc/connect/protocol-grpc";
import type { CallContext } from "../api/context.js";
import { protocolFailure } from "../api/interceptors.js";
import { MAX_TIMER_MS } from "../clock.js";
import type { UnaryInvoker } from "../api/unary-invoker.js";
import { ClientGoneError, readBody } from "./request-body.js";

/** The envelope before each gRPC message: a flags byte and a 4-byte big-endian length. */
const ENVELOPE_HEADER_BYTES = 5;
const FLAG_COMPRESSED = 0b0000_0001;

/** Any deadline grpc-timeout can express is accepted, as Connect's router (no maxTimeoutMs) accepts it. */
const MAX_TIMEOUT_MS = Number.MAX_SAFE_INTEGER;

/** A request this path serves: the method, and the HTTP/2 request and response it came on. */
interface UnaryCall {
  method: DescMethodUnary;
  req: http2.Http2ServerRequest;
  res: http2.Http2ServerResponse;
}

export interface GrpcUnaryOptions {
  /** The largest message accepted, as Connect's router's readMaxBytes. */
  readMaxBytes: number;
}

/**
 * Unary gRPC calls (binary protobuf, uncompressed, HTTP/2) served without
 * connect-node's universal handler: the body is read whole, its one envelope
 * decoded, the call made through the UnaryInvoker (the same interceptors and
 * implementations as every other protocol) and the answer written as one
 * envelope and the status trailers, with Connect's own gRPC primitives
 * (status trailer, deadline header). The universal handler's streams, linked
 * abort signals and AbortError per call cost more than the rest of a decide
 * (docs/benchmarks.md). Anything else — streaming methods, gRPC-Web, JSON
 * payloads, compressed requests — `accepts` declines and Connect serves.
 */
export class GrpcUnaryPath {
  constructor(
    private readonly invoker: UnaryInvoker,
    private readonly options: GrpcUnaryOptions,
  ) {}

  /** The call to serve, or undefined to leave the request to Connect. */
  accepts(req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse, pathname: string): UnaryCall | undefined {
    if (!(req instanceof http2.Http2ServerRequest) || !(res instanceof http2.Http2ServerResponse) || req.method !== "POST") return undefined;
    const contentType = req.headers["content-type"];
    if (contentType !== "application/grpc" && contentType !== contentTypeProto) return undefined;
    const encoding = req.headers[headerEncoding.toLowerCase()];
    if (encoding !== undefined && encoding !== "identity") return undefined;
    const method = this.invoker.at(pathname);
    return method && { method, req, res };
  }

  /** Answers the call; never throws (a failure is a status in the trailers, and the call context's error). */
  async serve({ method, req, res }: UnaryCall, context: CallContext, url: string): Promise<void> {
    const abort = new AbortController();
    // Only a client that went away mid-call aborts it (an AbortError is costly to build).
    res.once("close", () => {
      if (!res.writableEnded && !abort.signal.aborted) abort.abort(new ConnectError("the client went away", Code.Canceled));
    });
    const deadline = new Deadline(abort);
    const header = new Headers({ "content-type": contentTypeProto });
    const trailer = new Headers();
    let body: Uint8Array | undefined;
    try {
      // Its caller was let through already (the dispatcher asks before the grpc-timeout is read).
      const timeout = parseTimeout(headerValue(req.headers[headerTimeout.toLowerCase()]), MAX_TIMEOUT_MS);
      if (timeout.error) throw timeout.error;
      if (timeout.timeoutMs !== undefined) deadline.start(timeout.timeoutMs);
      const message = decodeOne(method, await deadline.race(readBody(req, this.options.readMaxBytes + ENVELOPE_HEADER_BYTES, () => tooLarge(this.options.readMaxBytes))), this.options.readMaxBytes);
      const requestHeader = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (!name.startsWith(":") && typeof value === "string") requestHeader.set(name, value);
      }
      // The deadline aborts the call's signal, which the innermost interceptor (RunningCalls) answers as
      // every protocol's: the race is needed here only for the message, read before the interceptors.
      const response = await this.invoker.invoke({
        method,
        message,
        header: requestHeader,
        signal: abort.signal,
        timeoutMs: () => deadline.remainingMs(),
        protocolName: "grpc",
        requestMethod: "POST",
        url,
        context,
      });
      response.header.forEach((value, name) => header.set(name, value));
      response.trailer.forEach((value, name) => trailer.set(name, value));
      body = encodeEnvelope(0, toBinary(method.output, response.message));
      trailer.set(headerGrpcStatus, grpcStatusOk);
    } catch (error) {
      // No one is left to answer: nothing is written (499 CANCELED).
      if (error instanceof ClientGoneError) return;
      const failure = context.error ?? protocolFailure(context, ConnectError.from(error, Code.Internal));
      setGrpcStatus(trailer, failure);
    } finally {
      deadline.clear();
    }
    if (res.stream.destroyed) return;
    res.writeHead(200, headersObject(header));
    res.addTrailers(headersObject(trailer));
    // A client still sending (a message over the limit, a deadline that passed mid-upload) is told to stop
    // once this answer is complete: listener.ts, for every HTTP/2 stream.
    if (body) res.end(body);
    else res.end();
  }
}

/**
 * The call's grpc-timeout: when it passes, the call's signal is aborted and
 * the client answered DEADLINE_EXCEEDED at once, whatever the implementation
 * is still doing (a decide already under way is still recorded: shutdown
 * waits for it, RunningCalls.settled).
 */
class Deadline {
  private timer: NodeJS.Timeout | undefined;
  private at: number | undefined;
  private expired: Promise<never> | undefined;

  constructor(private readonly abort: AbortController) {}

  start(ms: number): void {
    this.at = Date.now() + ms;
    // grpc-timeout allows up to 99,999,999 hours; Node's timers fire at once past about 24.8 days.
    if (ms > MAX_TIMER_MS) return;
    this.expired = new Promise<never>((_, reject) => {
      this.timer = setTimeout(() => {
        const error = new ConnectError("the operation timed out", Code.DeadlineExceeded);
        this.abort.abort(error);
        reject(error);
      }, ms);
    });
    // Whoever races it sees the rejection; before anyone does, it must not count as unhandled.
    this.expired.catch(() => undefined);
  }

  remainingMs(): number | undefined {
    return this.at === undefined ? undefined : this.at - Date.now();
  }

  race<T>(work: Promise<T>): Promise<T> {
    return this.expired ? Promise.race([work, this.expired]) : work;
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}

/**
 * A grpc-message as the gRPC protocol encodes it: printable ASCII as it is,
 * '%' and every other byte of its UTF-8 percent-encoded. connect-es encodes
 * it as a URI component instead, which @grpc/grpc-js (decodeURI) leaves half
 * encoded: "invalid, expired" arrived as "invalid%2C expired".
 */
export function encodeGrpcMessage(message: string): string {
  let encoded = "";
  for (const byte of Buffer.from(message, "utf8")) {
    encoded += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return encoded;
}

/**
 * A failed call's status fields as this service writes them on every gRPC path (trailers, or the headers of a
 * trailers-only answer): Connect's status, details and metadata (the service's error code, the request id), the
 * message encoded as the gRPC protocol says (encodeGrpcMessage).
 */
export function setGrpcStatus(fields: Headers, failure: ConnectError): void {
  setTrailerStatus(fields, failure);
  fields.set(headerGrpcMessage, encodeGrpcMessage(failure.rawMessage));
}

function headersObject(headers: Headers): http2.OutgoingHttpHeaders {
  const object: http2.OutgoingHttpHeaders = {};
  headers.forEach((value, name) => (object[name] = value));
  return object;
}

function headerValue(value: string | string[] | undefined): string | null {
  return typeof value === "string" ? value : null;
}

function tooLarge(readMaxBytes: number): ConnectError {
  return new ConnectError(`message size is larger than configured readMaxBytes ${readMaxBytes}`, Code.ResourceExhausted);
}

/**
 * A unary request that carried no message, or more than one: a fault of the client's framing. connect-es
 * answers it UNIMPLEMENTED, which this service keeps for a capability not landed yet (library-refusal.ts
 * gives its refusals these words too).
 */
export function messageCountError(carried: string): ConnectError {
  return new ConnectError(`protocol error: a unary call takes one request message; this one carried ${carried}`, Code.InvalidArgument);
}

/**
 * The request's one message; the errors Connect's gRPC handler gives for the same faults, but for the
 * client's framing faults, which connect-es answers UNIMPLEMENTED or INTERNAL: INVALID_ARGUMENT here, each
 * stating the mismatch.
 */
function decodeOne(method: DescMethodUnary, body: Buffer, readMaxBytes: number) {
  if (body.length === 0) throw messageCountError("none");
  if (body.length < ENVELOPE_HEADER_BYTES) {
    throw new ConnectError(`protocol error: incomplete envelope: a message's envelope takes ${ENVELOPE_HEADER_BYTES} bytes, the request has ${body.length}`, Code.InvalidArgument);
  }
  const flags = body[0] as number;
  const length = body.readUInt32BE(1);
  if (length > readMaxBytes) {
    throw new ConnectError(`message size ${length} is larger than configured readMaxBytes ${readMaxBytes}`, Code.ResourceExhausted);
  }
  const end = ENVELOPE_HEADER_BYTES + length;
  if (body.length !== end) {
    const messages = wholeEnvelopes(body);
    if (messages > 1) throw messageCountError(String(messages));
    // Fewer bytes than declared, or more that are no whole envelope: a length that does not fit the message.
    throw new ConnectError(`protocol error: the request's envelope declares ${length} bytes but ${body.length - ENVELOPE_HEADER_BYTES} followed`, Code.InvalidArgument);
  }
  // Only bit 0 (compressed) is defined for a request message (gRPC's protocol; 0x80 marks gRPC-Web's trailers).
  const undefinedFlags = flags & ~FLAG_COMPRESSED;
  if (undefinedFlags !== 0) {
    throw new ConnectError(`protocol error: envelope flags 0x${undefinedFlags.toString(16).padStart(2, "0")} are not defined for a request message`, Code.InvalidArgument);
  }
  // connect-es says INTERNAL here; the fault is the client's (a flag without a grpc-encoding), as for bytes that do not parse.
  if (flags & FLAG_COMPRESSED) throw new ConnectError("protocol error: the message is flagged compressed, but the call names no grpc-encoding", Code.InvalidArgument);
  try {
    return fromBinary(method.input, body.subarray(ENVELOPE_HEADER_BYTES, end));
  } catch (error) {
    throw new ConnectError(`parse binary: ${error instanceof Error ? error.message : String(error)}`, Code.InvalidArgument);
  }
}

/** How many envelopes `body` holds, when it is whole envelopes end to end; 0 when it is not. */
function wholeEnvelopes(body: Buffer): number {
  let count = 0;
  let at = 0;
  while (at + ENVELOPE_HEADER_BYTES <= body.length) {
    at += ENVELOPE_HEADER_BYTES + body.readUInt32BE(at + 1);
    count++;
  }
  return at === body.length ? count : 0;
}
