// connect-es answers a request message that does not decode (binary bytes that are no message of the RPC's
// input) as `internal`: 500 over Connect, grpc-status 13 over gRPC-Web. That is the client's fault, and a
// client told 500 retries it (part 7: "server error, automatically retried"). Binary gRPC takes the unary
// path, which answers INVALID_ARGUMENT itself (grpc-unary.ts); this gives the library's refusals the same code.
import { readAllBytes, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { ERROR_CODE_HEADER } from "../api/errors.js";

const GRPC_INVALID_ARGUMENT = "3";
/** gRPC-Web sends its trailers as the last frame of the body, flagged so. */
const TRAILER_FRAME = 0x80;
/** A Connect error answer is small; reading one past this fails the answer instead. */
const MAX_REFUSAL_BYTES = 64 * 1024;

/**
 * The answer with an `internal` refusal made before any of the service's code ran turned into
 * `invalid_argument` (the caller knows that none ran: no interceptor saw the call). Any other answer is
 * returned as it is.
 */
export async function asClientFault(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  const contentType = res.header?.get("content-type") ?? "";
  if (res.header?.has(ERROR_CODE_HEADER)) return res;
  if (res.body === undefined) return res;
  if (contentType.startsWith("application/grpc-web")) {
    // Only the first chunk, the refusal's trailer frame: the rest of the body, if any, passes as it comes (a
    // client still sending past the size limit keeps the stream open, and its error must not wait for that).
    const chunks = res.body[Symbol.asyncIterator]();
    const first = await chunks.next();
    if (first.done === true) return res;
    const rewritten = grpcWebAsInvalidArgument(first.value);
    const header = new Headers(res.header);
    if (rewritten !== first.value) header.delete("content-length");
    return { ...res, header, body: prepend(rewritten, chunks) };
  }
  if (res.status === 500 && contentType.startsWith("application/json")) {
    const body = await readAllBytes(res.body, MAX_REFUSAL_BYTES);
    const error = JSON.parse(new TextDecoder().decode(body)) as { code?: unknown };
    if (error.code !== "internal") return withBody(res, res.status, res.header, body);
    const header = new Headers(res.header);
    header.set(ERROR_CODE_HEADER, "VALIDATION_ERROR");
    return withBody(res, 400, header, new TextEncoder().encode(JSON.stringify({ ...error, code: "invalid_argument" })));
  }
  return res;
}

/** The answer with another status and body, its Content-Length that of the new body. */
function withBody(res: UniversalServerResponse, status: number, header: Headers | undefined, body: Uint8Array): UniversalServerResponse {
  const headers = new Headers(header);
  if (headers.has("content-length")) headers.set("content-length", String(body.byteLength));
  return { ...res, status, header: headers, body: once(body) };
}

/** A gRPC-Web body whose trailer frame says grpc-status 13, saying 3 instead, with the error code the service's own refusals carry. */
function grpcWebAsInvalidArgument(body: Uint8Array): Uint8Array {
  let at = 0;
  while (at + 5 <= body.length) {
    const length = new DataView(body.buffer, body.byteOffset + at + 1, 4).getUint32(0);
    const end = at + 5 + length;
    if (end > body.length) break;
    if ((body[at] ?? 0) & TRAILER_FRAME) {
      const trailer = new TextDecoder().decode(body.subarray(at + 5, end));
      const rewritten = trailer.replace(/^grpc-status: ?13(\r?)$/im, `grpc-status: ${GRPC_INVALID_ARGUMENT}$1`);
      if (rewritten === trailer) return body;
      const bytes = new TextEncoder().encode(`${rewritten}${ERROR_CODE_HEADER}: VALIDATION_ERROR\r\n`);
      const frame = new Uint8Array(5 + bytes.length);
      frame[0] = body[at] ?? TRAILER_FRAME;
      new DataView(frame.buffer).setUint32(1, bytes.length);
      frame.set(bytes, 5);
      const out = new Uint8Array(at + frame.length);
      out.set(body.subarray(0, at));
      out.set(frame, at);
      return out;
    }
    at = end;
  }
  return body;
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}

async function* prepend(first: Uint8Array, rest: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  yield first;
  for (let next = await rest.next(); next.done !== true; next = await rest.next()) yield next.value;
}
