import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { parseTimeout as parseConnectTimeout } from "@connectrpc/connect/protocol-connect";
import { parseTimeout as parseGrpcTimeout } from "@connectrpc/connect/protocol-grpc";
import type { UniversalServerRequest } from "@connectrpc/connect/protocol";
import { MAX_TIMER_MS } from "../clock.js";
import { callContext } from "./context.js";

/**
 * The calls whose handlers are running, on every protocol: the innermost
 * interceptor. A call is answered as soon as its signal aborts, when the
 * caller's deadline passes (grpc-timeout, connect-timeout-ms: DEADLINE_EXCEEDED)
 * or the caller goes away, instead of when its handler ends (connect-es lets
 * handlers run on). What the handler started still finishes, such as a
 * decide's record; `settled()` waits for it at shutdown, so the store is not
 * closed under it.
 */
export class RunningCalls {
  private readonly running = new Set<Promise<unknown>>();

  readonly interceptor: Interceptor = (next) => (req) => {
    const { signal } = req;
    // Without a deadline a call is cut short only by its caller's leaving, when no one is left to answer:
    // the race (a listener and two promises, 5 µs of a 100 µs analyze) is for calls that carry one.
    const timeoutMs = deadlineMs(req.header);
    const bounded = timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS;
    // Its deadline gone by before the handler starts: nothing is run. (A body still arriving at the deadline
    // is cut off before any interceptor sees the call, rate limits included: bodyWithinDeadline.)
    if (bounded && signal.aborted) return Promise.reject(cutShortBy(signal));
    callContext(req.contextValues).handlerStartedAt = performance.now();
    const handled = next(req);
    this.running.add(handled);
    const forget = () => this.running.delete(handled);
    handled.then(forget, forget);
    if (!bounded) return handled;
    return new Promise((resolve, reject) => {
      const cutShort = () => reject(cutShortBy(signal));
      signal.addEventListener("abort", cutShort, { once: true });
      handled.then(resolve, reject).finally(() => signal.removeEventListener("abort", cutShort));
    });
  };

  /** Resolves once every call started so far has finished, answered or not (shutdown). */
  async settled(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }
}

/**
 * The deadline header to take off a request before connect-es reads it, when its deadline is past what a
 * timer can wait: connect-es would hand it to setTimeout, which fires at once and warns on every call. The
 * deadline is then none, as on the unary gRPC path.
 */
export function unwaitableDeadlineHeader(header: Headers): string | undefined {
  const timeoutMs = deadlineMs(header);
  if (timeoutMs === undefined || timeoutMs <= MAX_TIMER_MS) return undefined;
  return header.has("connect-timeout-ms") ? "connect-timeout-ms" : "grpc-timeout";
}

/**
 * The request with its body cut off at the call's deadline. connect-es reads
 * the whole request message before any interceptor, or its own deadline,
 * can act: a client sending slowly would be answered only once its last
 * byte came, or never. Cut off, the read fails with DEADLINE_EXCEEDED, which
 * connect-es answers in the call's protocol before any interceptor has seen
 * the call: nothing is run, or counted against a rate limit. (The unary gRPC
 * path races its own read: grpc-unary.ts.)
 */
export function bodyWithinDeadline(request: UniversalServerRequest): UniversalServerRequest {
  const timeoutMs = deadlineMs(request.header);
  const { body } = request;
  if (timeoutMs === undefined || timeoutMs > MAX_TIMER_MS || typeof body !== "object" || body === null || !(Symbol.asyncIterator in body)) return request;
  return { ...request, body: cutOffAt(body, timeoutMs) };
}

async function* cutOffAt(body: AsyncIterable<Uint8Array>, timeoutMs: number): AsyncGenerator<Uint8Array> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ConnectError("the deadline passed before the request's message arrived", Code.DeadlineExceeded)), timeoutMs);
  });
  // Raced below at every chunk; a body read to its end before the deadline leaves it unobserved.
  expired.catch(() => undefined);
  const chunks = body[Symbol.asyncIterator]();
  try {
    for (;;) {
      // The read left pending at the deadline ends with the request; the answer is not held for it.
      const next = await Promise.race([chunks.next(), expired]);
      if (next.done === true) return;
      yield next.value;
    }
  } finally {
    clearTimeout(timer);
  }
}

/** The call's deadline as its protocol's header gives it, in milliseconds; undefined without one (or a malformed one, refused elsewhere). */
function deadlineMs(header: Headers): number | undefined {
  const connect = header.get("connect-timeout-ms");
  if (connect !== null) return parseConnectTimeout(connect, Number.MAX_SAFE_INTEGER).timeoutMs;
  const grpc = header.get("grpc-timeout");
  return grpc === null ? undefined : parseGrpcTimeout(grpc, Number.MAX_SAFE_INTEGER).timeoutMs;
}

/**
 * Why a call whose signal aborted was cut short: its deadline passing (connect-es's DEADLINE_EXCEEDED), else
 * its caller's leaving, however the transport reports that (a connection reset, an HTTP/2 stream reset with
 * any code: connect-node reads a client's RST_STREAM INTERNAL_ERROR as an `internal` error, which would be
 * answered and logged as a fault of the service).
 */
export function cutShortBy(signal: AbortSignal): ConnectError {
  const reason: unknown = signal.reason;
  return reason instanceof ConnectError && reason.code === Code.DeadlineExceeded ? reason : new ConnectError("the caller went away", Code.Canceled);
}
