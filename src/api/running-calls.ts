import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { parseTimeout as parseConnectTimeout } from "@connectrpc/connect/protocol-connect";
import { parseTimeout as parseGrpcTimeout } from "@connectrpc/connect/protocol-grpc";
import { callContext } from "./context.js";

/**
 * The longest a Node timer waits (about 24.8 days); past it one fires at once. Longer deadlines are treated
 * as none: connect-es's own timer for them would end the call at once.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

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
    // Its deadline gone by before the handler starts (a body that came slowly): nothing is run, or counted.
    if (bounded && signal.aborted) return Promise.reject(reasonOf(signal));
    callContext(req.contextValues).handlerStartedAt = performance.now();
    const handled = next(req);
    this.running.add(handled);
    const forget = () => this.running.delete(handled);
    handled.then(forget, forget);
    if (!bounded) return handled;
    return new Promise((resolve, reject) => {
      const cutShort = () => reject(reasonOf(signal));
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

/** The call's deadline as its protocol's header gives it, in milliseconds; undefined without one (or a malformed one, refused elsewhere). */
function deadlineMs(header: Headers): number | undefined {
  const connect = header.get("connect-timeout-ms");
  if (connect !== null) return parseConnectTimeout(connect, Number.MAX_SAFE_INTEGER).timeoutMs;
  const grpc = header.get("grpc-timeout");
  return grpc === null ? undefined : parseGrpcTimeout(grpc, Number.MAX_SAFE_INTEGER).timeoutMs;
}

/** Why a call was cut short: the transport's own error (a deadline), else the caller's leaving. */
function reasonOf(signal: AbortSignal): ConnectError {
  return signal.reason instanceof ConnectError ? signal.reason : new ConnectError("the caller went away", Code.Canceled);
}
