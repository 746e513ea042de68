import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, type ErrorDetail, type FieldViolation } from "../../gen/fraud/v1/errors_pb.js";

/**
 * The service's error codes. The specification names VALIDATION_ERROR,
 * UNAUTHORIZED, FORBIDDEN, RATE_LIMIT_EXCEEDED and INTERNAL_ERROR; the rest are
 * this service's decisions (docs/api-decisions.md).
 */
export type ErrorCode =
  | "VALIDATION_ERROR"
  | "UNAUTHORIZED"
  | "FORBIDDEN"
  | "NOT_FOUND"
  | "METHOD_NOT_ALLOWED"
  | "CONFLICT"
  | "EVIDENCE_TAMPERED"
  | "PAYLOAD_TOO_LARGE"
  | "UNSUPPORTED_MEDIA_TYPE"
  | "RATE_LIMIT_EXCEEDED"
  | "NOT_IMPLEMENTED"
  | "INTERNAL_ERROR"
  | "SERVICE_UNAVAILABLE"
  | "TIMEOUT"
  | "CANCELED";

/** One row per code: its gRPC/Connect code and its REST status. */
const ERROR_TABLE: Record<ErrorCode, { grpc: Code; http: number }> = {
  VALIDATION_ERROR: { grpc: Code.InvalidArgument, http: 400 },
  UNAUTHORIZED: { grpc: Code.Unauthenticated, http: 401 },
  FORBIDDEN: { grpc: Code.PermissionDenied, http: 403 },
  NOT_FOUND: { grpc: Code.NotFound, http: 404 },
  METHOD_NOT_ALLOWED: { grpc: Code.Unimplemented, http: 405 },
  CONFLICT: { grpc: Code.FailedPrecondition, http: 409 },
  // The stored evidence no longer matches its integrity hash: the data is corrupt, retrying cannot help.
  EVIDENCE_TAMPERED: { grpc: Code.DataLoss, http: 409 },
  PAYLOAD_TOO_LARGE: { grpc: Code.ResourceExhausted, http: 413 },
  UNSUPPORTED_MEDIA_TYPE: { grpc: Code.InvalidArgument, http: 415 },
  RATE_LIMIT_EXCEEDED: { grpc: Code.ResourceExhausted, http: 429 },
  NOT_IMPLEMENTED: { grpc: Code.Unimplemented, http: 501 },
  INTERNAL_ERROR: { grpc: Code.Internal, http: 500 },
  SERVICE_UNAVAILABLE: { grpc: Code.Unavailable, http: 503 },
  TIMEOUT: { grpc: Code.DeadlineExceeded, http: 504 },
  CANCELED: { grpc: Code.Canceled, http: 499 },
};

/** For errors raised by the protocol layer itself, which carry no ErrorDetail. */
const CODE_FROM_GRPC: Partial<Record<Code, ErrorCode>> = {
  [Code.InvalidArgument]: "VALIDATION_ERROR",
  [Code.Unauthenticated]: "UNAUTHORIZED",
  [Code.PermissionDenied]: "FORBIDDEN",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "CONFLICT",
  [Code.FailedPrecondition]: "CONFLICT",
  [Code.Aborted]: "CONFLICT",
  [Code.ResourceExhausted]: "PAYLOAD_TOO_LARGE",
  [Code.Unimplemented]: "NOT_IMPLEMENTED",
  [Code.Unavailable]: "SERVICE_UNAVAILABLE",
  [Code.DeadlineExceeded]: "TIMEOUT",
  [Code.Canceled]: "CANCELED",
};

/** The REST status of an error code. */
export function httpStatusOf(code: ErrorCode): number {
  return ERROR_TABLE[code].http;
}

/** The status logged and counted for a call whose client left before its answer was written (nginx's 499). */
export const CLIENT_CLOSED_REQUEST = httpStatusOf("CANCELED");

/** The service's code for a status the protocol layer answered by itself (undefined for OK or one it has none for). */
export function errorCodeOfProtocolRefusal(code: Code): ErrorCode | undefined {
  return CODE_FROM_GRPC[code];
}

/** Response header (Connect, REST) or trailer (gRPC) that carries the code string. */
export const ERROR_CODE_HEADER = "fraud-error-code";

export interface ApiErrorOptions {
  fieldViolations?: Array<Pick<FieldViolation, "field" | "description">>;
  retryAfterSeconds?: number;
  /** The underlying error, kept for the server log and never sent to clients. */
  cause?: unknown;
}

/**
 * Thrown by any part of the service that is at capacity (a bounded queue is
 * full): the caller may try again shortly. The error interceptor answers it
 * as 503 SERVICE_UNAVAILABLE with Retry-After, wherever it comes from.
 */
export class AtCapacityError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds = 1,
  ) {
    super(message);
    this.name = "AtCapacityError";
  }
}

/** The answer to an {@link AtCapacityError}: an overload the client can retry, not a fault. */
export function overloadError(raw: AtCapacityError): ConnectError {
  const wait = raw.retryAfterSeconds === 1 ? "a second" : `${raw.retryAfterSeconds} seconds`;
  return apiError("SERVICE_UNAVAILABLE", `${raw.message}: retry in ${wait}`, { retryAfterSeconds: raw.retryAfterSeconds, cause: raw });
}

/** A fault of the service as its client sees it: the request id to quote, nothing of the cause (that goes to the log). */
export function internalError(requestId: string, cause: unknown): ConnectError {
  return apiError("INTERNAL_ERROR", `internal error; quote request id ${requestId} when reporting it`, { cause });
}

/**
 * Gives an error the protocol layer raised (a message too large, a deadline passed, bytes that do not decode)
 * what every error of the service carries: its code string in `fraud-error-code` and in a `fraud.v1.ErrorDetail`
 * detail (read from the gRPC code when the error does not name one). An error that has them keeps them.
 */
export function withServiceCode(error: ConnectError): ConnectError {
  const code = (error.metadata.get(ERROR_CODE_HEADER) as ErrorCode | null) ?? describeError(error).code;
  error.metadata.set(ERROR_CODE_HEADER, code);
  if (error.findDetails(ErrorDetailSchema).length === 0) error.details.push({ desc: ErrorDetailSchema, value: create(ErrorDetailSchema, { code }) });
  return error;
}

/** The one way handlers and interceptors fail a call, whatever the protocol. */
export function apiError(code: ErrorCode, message: string, options: ApiErrorOptions = {}): ConnectError {
  const detail = create(ErrorDetailSchema, {
    code,
    fieldViolations: options.fieldViolations ?? [],
    retryAfterSeconds: options.retryAfterSeconds ?? 0,
  });
  const metadata = new Headers({ [ERROR_CODE_HEADER]: code });
  if (options.retryAfterSeconds !== undefined) metadata.set("retry-after", String(options.retryAfterSeconds));
  return new ConnectError(message, ERROR_TABLE[code].grpc, metadata, [{ desc: ErrorDetailSchema, value: detail }], options.cause);
}

export interface DescribedError {
  httpStatus: number;
  code: ErrorCode;
  message: string;
  detail: ErrorDetail;
}

/** How an error is shown to a REST client and in metrics. */
export function describeError(error: ConnectError): DescribedError {
  const detail = error.findDetails(ErrorDetailSchema)[0];
  const code = (detail?.code as ErrorCode | undefined) ?? CODE_FROM_GRPC[error.code] ?? "INTERNAL_ERROR";
  return {
    httpStatus: ERROR_TABLE[code]?.http ?? 500,
    code,
    message: error.rawMessage,
    detail: detail ?? create(ErrorDetailSchema, { code }),
  };
}

