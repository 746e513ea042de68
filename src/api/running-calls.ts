import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

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
    const handled = next(req);
    this.running.add(handled);
    const forget = () => this.running.delete(handled);
    handled.then(forget, forget);
    // Without a deadline a call is cut short only by its caller's leaving, when no one is left to answer:
    // the race (a listener and two promises, 5 µs of a 100 µs analyze) is for calls that carry one.
    if (!req.header.has("connect-timeout-ms") && !req.header.has("grpc-timeout")) return handled;
    const { signal } = req;
    if (signal.aborted) return Promise.reject(reasonOf(signal));
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

/** Why a call was cut short: the transport's own error (a deadline), else the caller's leaving. */
function reasonOf(signal: AbortSignal): ConnectError {
  return signal.reason instanceof ConnectError ? signal.reason : new ConnectError("the caller went away", Code.Canceled);
}
