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

/** A JSON body whose bytes are not UTF-8. */
export class NotUtf8Error extends Error {
  constructor() {
    super("request body is not valid UTF-8");
    this.name = "NotUtf8Error";
  }
}

const FATAL_UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The decoder of every JSON body, REST, Connect and gRPC JSON alike: JSON text is UTF-8 (RFC 8259), and
 * malformed bytes are refused ({@link NotUtf8Error}) rather than turned into U+FFFD, which would make
 * different user ids one, and store evidence of what the client never sent.
 */
export const strictUtf8 = {
  decode(bytes: Uint8Array): string {
    try {
      return FATAL_UTF8.decode(bytes);
    } catch {
      throw new NotUtf8Error();
    }
  },
};

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

/** How dropping a refused request's body ended (dropBody). */
export type DroppedBody = "ended" | "over-limit" | "gone";

/**
 * Drops the rest of an HTTP/1.1 request's body that was refused before it was read (a caller not let
 * through), as it comes, so that the requests pipelined behind it stay readable. A body declared, or found,
 * over `limit` bytes is not worth reading, from a caller the service does not serve least of all: reading
 * stops there ("over-limit") and the caller closes the connection after its answer, as after a 413. "gone":
 * the client closed the request first.
 */
export function dropBody(req: Readable & { readonly complete: boolean; readonly headers: Record<string, string | string[] | undefined> }, limit: number): Promise<DroppedBody> {
  if (req.complete) return Promise.resolve("ended");
  if (Number(req.headers["content-length"] ?? NaN) > limit) return Promise.resolve("over-limit");
  return new Promise((resolve) => {
    let size = 0;
    const settle = (outcome: DroppedBody) => {
      req.off("data", onData).off("end", onEnd).off("error", onGone).off("close", onGone);
      if (outcome === "over-limit") req.pause();
      resolve(outcome);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) settle("over-limit");
    };
    const onEnd = () => settle("ended");
    const onGone = () => settle("gone");
    req.on("data", onData).on("end", onEnd).on("error", onGone).on("close", onGone);
  });
}

/** Node's own test, so that the requests it hands over unanswered (`checkContinue`) are the ones found here. */
const CONTINUE_EXPECTATION = /(?:^|\W)100-continue(?:$|\W)/i;

/** Whether the client waits to be told (100 Continue) before it sends its body (RFC 9110, 10.1.1). */
export function expectsContinue(req: { readonly headers: { readonly expect?: string | undefined } }): boolean {
  const { expect } = req.headers;
  return expect !== undefined && CONTINUE_EXPECTATION.test(expect);
}

/**
 * The transfer codings of an HTTP/1.1 request other than the `chunked` Node decodes, as the client wrote
 * them, or undefined when there are none. Node's parser frames a body by its last coding, chunked, and
 * reads `gzip, chunked` as if the gzip were not there: such a body would be read as something it is not,
 * and read differently by a proxy in front that does decode it (RFC 9112, 6.1: answered 501).
 */
export function unsupportedTransferCoding(req: { readonly headers: { readonly "transfer-encoding"?: string | undefined } }): string | undefined {
  const codings = req.headers["transfer-encoding"];
  if (codings === undefined || codings.trim().toLowerCase() === "chunked") return undefined;
  return codings;
}
