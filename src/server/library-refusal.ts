// What connect-es refuses itself, before any of the service's code runs (a message that does not decode, is
// too large, has an unknown JSON field, a compression it does not take, a malformed timeout), carries none of
// the service's own error code: this adds it (`fraud-error-code`, as every other error carries), so that a
// client can tell a message too large (PAYLOAD_TOO_LARGE, which Connect answers 429) from a rate limit.
//
// And connect-es answers a request message that does not decode (binary bytes that are no message of the
// RPC's input) as `internal`: 500 over Connect, grpc-status 13 over gRPC-Web and gRPC. That is the client's
// fault, and a client told 500 retries it (part 7: "server error, automatically retried"). Binary gRPC takes
// the unary path, which answers INVALID_ARGUMENT itself (grpc-unary.ts); this gives the library's refusals
// the same code. So too for a unary request that carried no message, or more than one, which connect-es
// answers `unimplemented`: this service keeps NOT_IMPLEMENTED for a capability not landed yet, and a client
// reading it would wait for a release rather than mend its framing.
import { Code, ConnectError } from "@connectrpc/connect";
import { readAllBytes, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { codeFromString, codeToHttpStatus, errorToJson } from "@connectrpc/connect/protocol-connect";
import { JSON_WRITE_OPTIONS } from "../api/contract.js";
import { ERROR_CODE_HEADER, errorCodeOfProtocolRefusal, withServiceCode, type ErrorCode } from "../api/errors.js";
import { encodeGrpcMessage, messageCountError, setGrpcStatus } from "./grpc-unary.js";

/** What a client sending a content type no protocol takes is told (gRPC-Web's text mode among them). */
function unsupportedMediaTypeMessage(streaming: boolean): string {
  // Connect's streaming calls have content types of their own.
  const connect = streaming ? "application/connect+json, application/connect+proto" : "application/json, application/proto";
  return (
    `unsupported content type: this method takes Connect (${connect}), gRPC (application/grpc, application/grpc+proto, ` +
    "application/grpc+json) and gRPC-Web (application/grpc-web, application/grpc-web+proto, application/grpc-web+json); " +
    "gRPC-Web's text mode (application/grpc-web-text) is not served: use the binary mode\n"
  );
}

/** gRPC-Web sends its trailers as the last frame of the body, flagged so. */
const TRAILER_FRAME = 0x80;
/** A Connect error answer is small; reading one past this fails the answer instead. */
const MAX_REFUSAL_BYTES = 64 * 1024;

/**
 * connect-es's refusals of a unary request's count of messages, and what it carried. (A server-streaming
 * call's are made inside the interceptors, where its message is read, and keep connect-es's code.)
 */
const MESSAGE_COUNT_REFUSAL = /^protocol error: (missing|received extra) input message for unary method$/;

/** A grpc-message as connect-es percent-encodes it; as it stands, should one not decode. */
function decodedGrpcMessage(encoded: string): string {
  try {
    return decodeURIComponent(encoded);
  } catch {
    return encoded;
  }
}

/**
 * A gRPC answer connect-node wrote (a compressed call, `grpc+json`, a stream) with its `grpc-message` encoded
 * as the gRPC protocol says, as the unary gRPC path encodes it (encodeGrpcMessage): connect-es encodes it as
 * a URI component, which @grpc/grpc-js, decoding it with `decodeURI`, leaves half encoded (`invalid%2C
 * expired`). The status is in the headers of a trailers-only answer, which are written after the body's
 * first part is read, or in the trailers, which are read once the body is done.
 */
export function withGrpcMessageEncoding(res: UniversalServerResponse): UniversalServerResponse {
  const mend = (fields: Headers | undefined) => {
    const message = fields?.get("grpc-message");
    if (fields !== undefined && message !== null && message !== undefined) fields.set("grpc-message", encodeGrpcMessage(decodedGrpcMessage(message)));
  };
  const body = res.body;
  if (body === undefined) {
    mend(res.header);
    mend(res.trailer);
    return res;
  }
  return {
    ...res,
    body: (async function* () {
      let first = true;
      for await (const chunk of body) {
        if (first) mend(res.header);
        first = false;
        yield chunk;
      }
      if (first) mend(res.header);
      mend(res.trailer);
    })(),
  };
}

/** A refusal's code and message. */
interface Refusal {
  code: Code;
  message: string;
}

/**
 * What a library refusal is answered with: `internal` (bytes that do not decode) is the client's fault, and
 * so is a request's count of messages, in the unary gRPC path's words. Any other `unimplemented` (a
 * compression the router does not take) is what it says.
 */
function answered(refusal: Refusal): Refusal {
  if (refusal.code === Code.Internal) return { code: Code.InvalidArgument, message: refusal.message };
  const count = refusal.code === Code.Unimplemented ? MESSAGE_COUNT_REFUSAL.exec(refusal.message) : null;
  return count === null ? refusal : { code: Code.InvalidArgument, message: messageCountError(count[1] === "missing" ? "none" : "more than one").rawMessage };
}

/**
 * A refusal as the service answers its own errors: with its code string, in `fraud-error-code` and in a
 * `fraud.v1.ErrorDetail` detail, which a client reads the same way whatever refused the call.
 */
function serviceError(refusal: Refusal, errorCode: ErrorCode): ConnectError {
  return withServiceCode(new ConnectError(refusal.message, refusal.code, { [ERROR_CODE_HEADER]: errorCode }));
}

/** An error's gRPC status fields (grpc-status, grpc-message, grpc-status-details-bin), as every gRPC path writes them. */
function grpcStatusFields(error: ConnectError): Headers {
  const fields = new Headers();
  setGrpcStatus(fields, error);
  return fields;
}

/**
 * An error's body in Connect's unary error format, as the router writes its own: `{code, message, details}`,
 * the details carrying the service's `fraud.v1.ErrorDetail` for Connect clients to read with findDetails.
 */
export function connectErrorJson(error: ConnectError): string {
  return JSON.stringify(errorToJson(error, JSON_WRITE_OPTIONS));
}

/** An answer of the library's, and the service's error code it now carries (undefined: not a refusal). */
export interface LibraryAnswer {
  response: UniversalServerResponse;
  code?: string | undefined;
}

/**
 * The answer to a call refused before any of the service's code ran (the
 * caller knows that none ran: no interceptor saw the call), with the
 * service's error code added and an `internal` refusal turned into
 * `invalid_argument`, and that code for the log. Any other answer is
 * returned as it is.
 */
export async function asClientFault(res: UniversalServerResponse, streaming: boolean): Promise<LibraryAnswer> {
  const contentType = res.header?.get("content-type") ?? "";
  if (res.header?.has(ERROR_CODE_HEADER)) return { response: res };
  if (res.status === 415) {
    // A content type no protocol of the router's takes: connect-es answers it with no body at all.
    const header = new Headers(res.header);
    header.set(ERROR_CODE_HEADER, "UNSUPPORTED_MEDIA_TYPE");
    header.set("content-type", "text/plain; charset=utf-8");
    return { response: withBody(res, 415, header, new TextEncoder().encode(unsupportedMediaTypeMessage(streaming))), code: "UNSUPPORTED_MEDIA_TYPE" };
  }
  if (contentType.startsWith("application/grpc-web")) {
    if (res.body === undefined) return { response: res };
    // Only the first chunk, the refusal's trailer frame: the rest of the body, if any, passes as it comes (a
    // client still sending past the size limit keeps the stream open, and its error must not wait for that).
    const chunks = res.body[Symbol.asyncIterator]();
    const first = await chunks.next();
    if (first.done === true) return { response: res };
    const refusal = grpcWebRefusal(first.value);
    const header = new Headers(res.header);
    if (refusal.body !== first.value) header.delete("content-length");
    return { response: { ...res, header, body: prepend(refusal.body, chunks) }, code: refusal.code };
  }
  if (contentType.startsWith("application/grpc")) {
    // gRPC (JSON over the library's path): the status is in the trailers, or in the headers of a trailers-only answer.
    const inTrailer = res.trailer?.has("grpc-status") === true;
    const fields = new Headers(inTrailer ? res.trailer : res.header);
    const status = Number(fields.get("grpc-status") ?? "0");
    const message = fields.get("grpc-message");
    const refusal = answered({ code: status, message: message === null ? "" : decodedGrpcMessage(message) });
    const errorCode = status === 0 ? undefined : errorCodeOfProtocolRefusal(refusal.code);
    if (errorCode === undefined) return { response: res };
    grpcStatusFields(serviceError(refusal, errorCode)).forEach((value, name) => fields.set(name, value));
    fields.set(ERROR_CODE_HEADER, errorCode);
    return { response: inTrailer ? { ...res, trailer: fields } : { ...res, header: fields }, code: errorCode };
  }
  if (res.status !== 200 && contentType.startsWith("application/json") && res.body !== undefined) {
    const body = await readAllBytes(res.body, MAX_REFUSAL_BYTES);
    const error = JSON.parse(new TextDecoder().decode(body)) as { code?: unknown; message?: unknown };
    const code = typeof error.code === "string" ? codeFromString(error.code) : undefined;
    const refusal = code === undefined ? undefined : answered({ code, message: typeof error.message === "string" ? error.message : "" });
    const errorCode = refusal === undefined ? undefined : errorCodeOfProtocolRefusal(refusal.code);
    if (refusal === undefined || errorCode === undefined) return { response: withBody(res, res.status, res.header, body) };
    const header = new Headers(res.header);
    header.set(ERROR_CODE_HEADER, errorCode);
    const status = refusal.code === code ? res.status : codeToHttpStatus(refusal.code);
    return { response: withBody(res, status, header, new TextEncoder().encode(connectErrorJson(serviceError(refusal, errorCode)))), code: errorCode };
  }
  return { response: res };
}

/** The answer with another status and body, its Content-Length that of the new body. */
function withBody(res: UniversalServerResponse, status: number, header: Headers | undefined, body: Uint8Array): UniversalServerResponse {
  const headers = new Headers(header);
  if (headers.has("content-length")) headers.set("content-length", String(body.byteLength));
  return { ...res, status, header: headers, body: once(body) };
}

/** A gRPC-Web body whose trailer frame has a failure, with the service's error code added (and a client's fault said as 3), and that code. */
function grpcWebRefusal(body: Uint8Array): { body: Uint8Array; code?: string } {
  let at = 0;
  while (at + 5 <= body.length) {
    const length = new DataView(body.buffer, body.byteOffset + at + 1, 4).getUint32(0);
    const end = at + 5 + length;
    if (end > body.length) break;
    if ((body[at] ?? 0) & TRAILER_FRAME) {
      const trailer = new TextDecoder().decode(body.subarray(at + 5, end));
      const status = /^grpc-status: ?(\d+)\r?$/im.exec(trailer);
      const encoded = /^grpc-message: ?(.*?)\r?$/im.exec(trailer)?.[1];
      const message = encoded === undefined ? "" : decodedGrpcMessage(encoded);
      const refusal = answered({ code: status ? Number(status[1]) : Code.Unknown, message });
      const errorCode = status && Number(status[1]) !== 0 ? errorCodeOfProtocolRefusal(refusal.code) : undefined;
      if (errorCode === undefined) return { body };
      // The trailer's status fields written anew, as every gRPC path writes them, the service's code after them.
      const others = trailer.split(/\r?\n/).filter((line) => line !== "" && !/^grpc-(?:status|message|status-details-bin):/i.test(line));
      const statusFields = grpcStatusFields(serviceError(refusal, errorCode));
      const lines = [...others, ...[...statusFields].map(([name, value]) => `${name}: ${value}`), `${ERROR_CODE_HEADER}: ${errorCode}`];
      const bytes = new TextEncoder().encode(lines.map((line) => `${line}\r\n`).join(""));
      const frame = new Uint8Array(5 + bytes.length);
      frame[0] = body[at] ?? TRAILER_FRAME;
      new DataView(frame.buffer).setUint32(1, bytes.length);
      frame.set(bytes, 5);
      const out = new Uint8Array(at + frame.length);
      out.set(body.subarray(0, at));
      out.set(frame, at);
      return { body: out, code: errorCode };
    }
    at = end;
  }
  return { body };
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}

async function* prepend(first: Uint8Array, rest: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  yield first;
  for (let next = await rest.next(); next.done !== true; next = await rest.next()) yield next.value;
}
