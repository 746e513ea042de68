import type { Readable } from "node:stream";

/**
 * The client closed the request before its body ended: there is no one to
 * answer. Callers write nothing, so the call is logged and counted as 499
 * CANCELED (the dispatcher: closed before its answer was written).
 */
export class ClientGoneError extends Error {
  constructor() {
    super("the client closed the request before its body ended");
    this.name = "ClientGoneError";
  }
}

/**
 * A request's whole body, for the REST gateway and the unary gRPC path alike:
 * refused with `tooLarge()` as soon as it passes `limit` bytes (the rest is
 * dropped as it comes; the answer ends the request), and refused too when
 * the client goes away before it ends. Stream events rather than an async
 * iterator, whose promises cost the request thread microseconds on every call.
 */
export function readBody(req: Readable, limit: number, tooLarge: () => Error): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const settle = (outcome: () => void) => {
      req.off("data", onData).off("end", onEnd).off("error", onError).off("close", onClose);
      outcome();
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) settle(() => reject(tooLarge()));
      else chunks.push(chunk);
    };
    const onEnd = () => settle(() => resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size)));
    const onError = (error: Error) => settle(() => reject(error));
    const onClose = () => settle(() => reject(new ClientGoneError()));
    req.on("data", onData).on("end", onEnd).on("error", onError).on("close", onClose);
  });
}
