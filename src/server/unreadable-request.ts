import http from "node:http";
import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "../api/errors.js";

/** Node's own answer to a request not in whole within its time (listener.ts ConnectionTimeouts): kept as it is. */
export const REQUEST_TIMEOUT_ANSWER = `HTTP/1.1 408 ${http.STATUS_CODES[408]}\r\nConnection: close\r\n\r\n`;

/** The chunk extensions Node's parser reads before it gives up on a request (node_http_parser.cc). */
const MAX_CHUNK_EXTENSIONS_BYTES = 16 * 1024;

/**
 * What Node's HTTP/1.1 parser (llhttp) refused, by its error code, in plain words. Codes llhttp reports
 * for other faults of the request's text are answered with a generic line naming the code.
 */
const PROBLEMS: Readonly<Record<string, string>> = {
  // llhttp reports a second Content-Length so, whether or not the two agree.
  HPE_UNEXPECTED_CONTENT_LENGTH: "more than one Content-Length header",
  HPE_INVALID_CONTENT_LENGTH: "a Content-Length that is not a number",
  HPE_INVALID_TRANSFER_ENCODING: "a Transfer-Encoding together with a Content-Length, or one whose last coding is not chunked",
  HPE_INVALID_CHUNK_SIZE: "a chunk size that is not hexadecimal",
  HPE_INVALID_HEADER_TOKEN:
    "a header line that is not name: value (a space or a separator in the name, a control character in the value, or a line folded onto the one before, which HTTP/1.1 no longer allows)",
  HPE_INVALID_METHOD: "a method that is not an HTTP method",
  HPE_INVALID_URL: "a request target that is neither a path starting with / nor an absolute URL",
  HPE_INVALID_VERSION: "a request line that does not end in HTTP/1.1 (or HTTP/1.0) and CRLF",
  HPE_CR_EXPECTED: "a line that does not end in CRLF",
  HPE_LF_EXPECTED: "a line that does not end in CRLF",
  HPE_INVALID_CONSTANT: "a request line or header that is not HTTP/1.1",
  HPE_UNEXPECTED_SPACE: "a space where HTTP/1.1 allows none",
};

/** A request Node's HTTP/1.1 parser refused: the error it is answered with, and the status (431 has no code of its own). */
export interface UnreadableRequest {
  error: ConnectError;
  status?: number;
}

/**
 * The answer to a request Node's HTTP/1.1 parser refused with `code` (the error's, HPE_...) and `reason`
 * (llhttp's words for it), which tells apart faults one code covers: llhttp reports a Transfer-Encoding
 * beside a Content-Length as an invalid Content-Length when the Transfer-Encoding comes first.
 */
export function unreadableRequest(code: string | undefined, reason: string | undefined): UnreadableRequest {
  if (code === "HPE_HEADER_OVERFLOW") {
    // Too large, as a body over its limit is; 431 says which part of it (RFC 6585).
    return { error: apiError("PAYLOAD_TOO_LARGE", `the request line and headers exceed the limit of ${http.maxHeaderSize} bytes`), status: 431 };
  }
  if (code === "HPE_CHUNK_EXTENSIONS_OVERFLOW") {
    return { error: apiError("PAYLOAD_TOO_LARGE", `a chunk's extensions exceed the limit of ${MAX_CHUNK_EXTENSIONS_BYTES} bytes`) };
  }
  const problem = reason !== undefined && /Transfer-Encoding/i.test(reason) && /Content-Length/i.test(reason) ? PROBLEMS.HPE_INVALID_TRANSFER_ENCODING : code === undefined ? undefined : PROBLEMS[code];
  if (problem !== undefined) return { error: apiError("VALIDATION_ERROR", `malformed HTTP/1.1 request: ${problem}`) };
  // Other faults in llhttp's own words (`Expected LF after chunk data`), with its code.
  return { error: apiError("VALIDATION_ERROR", `malformed HTTP/1.1 request (${code ?? "unknown fault"}${reason === undefined ? "" : `: ${reason}`})`) };
}
