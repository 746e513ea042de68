import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { RateLimitScope } from "../../gen/fraud/v1/options_pb.js";
import type { KeyService, Principal } from "../auth/key-service.js";
import { parseKeyShape, type Permission } from "../auth/keys.js";
import { clientNetwork } from "../engine/index.js";
import type { Logger } from "../log.js";
import { callContext, type CallContext } from "./context.js";
import { contractOf, type MethodContract } from "./contract.js";
import { AtCapacityError, ERROR_CODE_HEADER, apiError, describeError, internalError, overloadError, withServiceCode } from "./errors.js";
import type { RateLimitCheck, RateLimitOutcome, RateLimiter } from "./rate-limiter.js";
import { cutShortBy, type RunningCalls } from "./running-calls.js";
import { invalidRequest, validateMessage } from "./validation.js";

/**
 * The cross-cutting steps every call goes through, whatever its protocol
 * (the REST gateway applies the same list). Order matters and is fixed in
 * `apiInterceptors`: errors outermost, then who is calling, whether the input
 * is acceptable, and how often, before any handler runs.
 */

export const REQUEST_ID_HEADER = "x-request-id";

/** How connect-es's message starts when the bytes of a request message do not decode. */
const UNDECODABLE_MESSAGE = "parse binary: ";

/** Normalises every failure into an apiError and never lets internals out. */
function errorInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const context = callContext(req.contextValues);
    try {
      const res = await next(req);
      res.header.set(REQUEST_ID_HEADER, context.requestId);
      return res;
    } catch (raw) {
      let error: ConnectError;
      if (raw instanceof ConnectError && raw.metadata.has(ERROR_CODE_HEADER)) {
        error = raw;
      } else if (req.signal.aborted && (raw === req.signal.reason || (raw instanceof Error && raw.name === "AbortError"))) {
        // The handler gave up on a call cut short (its caller left, or its deadline passed), with the reason.
        error = protocolFailure(context, cutShortBy(req.signal));
      } else if (raw instanceof ConnectError && raw.cause === undefined && raw.code !== Code.Unknown && raw.code !== Code.Internal) {
        error = protocolFailure(context, raw);
      } else if (
        raw instanceof ConnectError &&
        ((raw.code === Code.Internal && raw.rawMessage.startsWith(UNDECODABLE_MESSAGE)) || raw.code === Code.InvalidArgument)
      ) {
        // A streaming call's message is read inside the interceptors: bytes that do not decode, which
        // connect-es calls internal, and JSON it cannot read (not UTF-8, not JSON), which it calls invalid
        // with the decoder's error as cause, are the client's fault (unary calls: server/library-refusal.ts).
        error = protocolFailure(context, new ConnectError(raw.rawMessage, Code.InvalidArgument));
      } else if (raw instanceof AtCapacityError) {
        error = overloadError(raw);
      } else {
        logger.log("error", "unhandled error", {
          requestId: context.requestId,
          rpc: `${req.service.typeName}/${req.method.name}`,
          error: raw instanceof Error ? (raw.stack ?? raw.message) : String(raw),
        });
        error = internalError(context.requestId, raw);
        // Counted all the same: the answer says what is left, as every counted answer does.
        for (const [name, value] of context.rateLimitHeaders ?? []) error.metadata.set(name, value);
      }
      error.metadata.set(REQUEST_ID_HEADER, context.requestId);
      context.error = error;
      throw error;
    }
  };
}

/**
 * A protocol-level error (a deadline passed, a bad one, unsupported encoding, ...), made to travel as every
 * other error does: its message is safe, its code string and the request id go with it, and the call
 * context records it (metrics). The error interceptor uses it, and the unary gRPC path for what fails
 * around the interceptors (its deadline passing, a message that does not decode).
 */
export function protocolFailure(context: CallContext, error: ConnectError): ConnectError {
  withServiceCode(error);
  error.metadata.set(REQUEST_ID_HEADER, context.requestId);
  context.error = error;
  return error;
}

/**
 * A header value without HTTP's optional whitespace (space and tab) around it: JavaScript's trim() and \s take
 * more (a no-break space, which a header's latin1 byte 0xA0 reads as), and a key so wrapped is not the key.
 */
function withoutOws(value: string | null): string | undefined {
  return value?.replace(/^[ \t]+|[ \t]+$/g, "");
}

/**
 * The request headers the key checks read: a Fetch Headers (RPC metadata), or a view of Node's own request
 * headers, which the dispatcher asks through before any Headers object is built.
 */
export type HeaderReader = Pick<Headers, "get" | "has">;

/** What a call presents as its API key: none, one, or something to refuse it for. */
export type PresentedKey =
  | { kind: "none" }
  | { kind: "key"; key: string }
  /** An Authorization header that is not "Bearer <key>": a mistake to point out, not an absent key. */
  | { kind: "malformed"; message: string }
  /** Two different keys of this service: which one was meant cannot be told. */
  | { kind: "conflicting"; message: string };

/**
 * Reads the key from X-API-Key or Authorization: Bearer (HTTP headers and gRPC metadata alike). With
 * X-API-Key present, Authorization may carry something else (a proxy's own credentials) and is not read,
 * unless it carries another API key of this service: which of the two was meant cannot be told.
 */
export function presentedKey(header: HeaderReader): PresentedKey {
  const apiKey = withoutOws(header.get("x-api-key"));
  const authorization = withoutOws(header.get("authorization"));
  const bearer = authorization ? /^Bearer[ \t]+([!-~]+)$/i.exec(authorization)?.[1] : undefined;
  if (apiKey) {
    // A header sent twice reaches here as its values joined by commas, which no key holds.
    if (apiKey.includes(",")) return { kind: "conflicting", message: "X-API-Key carries more than one value (was the header sent twice?); send one key" };
    if (bearer !== undefined && bearer !== apiKey && parseKeyShape(bearer) !== undefined) {
      return { kind: "conflicting", message: "X-API-Key and Authorization: Bearer carry two different API keys; send one" };
    }
    return { kind: "key", key: apiKey };
  }
  if (bearer !== undefined) return { kind: "key", key: bearer };
  if (authorization) return { kind: "malformed", message: "the Authorization header must be \"Bearer \" followed by the API key and nothing else" };
  return { kind: "none" };
}

/**
 * The principal of the key a call's headers carry, for every API call and the event stream alike: undefined
 * when they carry none and the operation serves anonymous callers; UNAUTHORIZED, saying why, otherwise
 * without a valid key (a key that is present is checked even where none is needed).
 */
export function authenticate(keys: KeyService, headers: HeaderReader, anonymousAllowed: false): Principal;
export function authenticate(keys: KeyService, headers: HeaderReader, anonymousAllowed: boolean): Principal | undefined;
export function authenticate(keys: KeyService, headers: HeaderReader, anonymousAllowed: boolean): Principal | undefined {
  const presented = presentedKey(headers);
  if (presented.kind === "conflicting") throw apiError("UNAUTHORIZED", presented.message);
  if (presented.kind !== "key") {
    if (anonymousAllowed) return undefined;
    throw apiError("UNAUTHORIZED", presented.kind === "malformed" ? presented.message : "an API key is required: send it in X-API-Key or Authorization: Bearer");
  }
  const principal = keys.authenticate(presented.key);
  if (!principal) throw apiError("UNAUTHORIZED", "the API key is invalid, expired or revoked");
  return principal;
}

/** FORBIDDEN, naming what is missing, when the principal lacks a permission `operation` needs. */
export function checkPermissions(principal: Principal, permissions: readonly Permission[], operation: string): void {
  const missing = permissions.find((needed) => !principal.permissions.has(needed));
  if (missing === undefined) return;
  throw apiError(
    "FORBIDDEN",
    principal.kind === "publishable" ? `publishable keys may only call decide and analyze; ${operation} needs a secret key` : `this key lacks the ${missing} permission`,
  );
}

/**
 * Lets the caller of `contract`'s operation through, or refuses it: 401 without a valid key (where one is
 * needed), 403 for a secret key from a web page or a key without the permission. The principal goes in the
 * call context (before a 403, so that the refusal's log line names the key). The dispatcher asks for every
 * API call, on every protocol, before its body is read: a caller without a key costs no body read or parse,
 * and is told 401 whatever the body holds. The auth interceptor asks too (for a call that did not come
 * through the dispatcher), and lets one already admitted through.
 */
export function admitCaller(keys: KeyService, contract: MethodContract, headers: HeaderReader, context: CallContext): void {
  if (context.admitted) return;
  const principal = authenticate(keys, headers, contract.access.allowAnonymous);
  if (principal) {
    context.principal = principal;
    // A browser names the page's origin; a secret key there is exposed to whoever loads the page. Refused on
    // every operation, those a page may call (decide, analyze, the status) included, so that the mistake shows
    // at once rather than in production (docs/api-decisions.md).
    if (principal.kind === "secret" && headers.has("origin")) {
      throw apiError("FORBIDDEN", "a secret key belongs on a server: this request comes from a web page (it has an Origin header), which must use a publishable key");
    }
    if (!contract.access.allowAnonymous) checkPermissions(principal, contract.permissions, contract.method.name);
  }
  context.admitted = true;
}

/** 401 without a valid key, 403 without the permission the RPC declares (admitCaller). */
function authInterceptor(keys: KeyService): Interceptor {
  return (next) => async (req) => {
    const contract = contractOf(req.method);
    if (contract) admitCaller(keys, contract, req.header, callContext(req.contextValues));
    return next(req);
  };
}

/** One rate limiter for every limit declared in the contract. */
function rateLimitInterceptor(
  limiter: RateLimiter,
  installationOverrides: Readonly<Record<string, number>>,
): Interceptor {
  return (next) => async (req) => {
    const contract = contractOf(req.method);
    if (!contract || contract.rateLimits.length === 0) return next(req);
    const context = callContext(req.contextValues);
    const principal = context.principal;
    const checks: RateLimitCheck[] = [];
    /** The checks a call refused as invalid gives back (those of rules that do not count refusals). */
    const refundable: RateLimitCheck[] = [];
    for (const rule of contract.rateLimits) {
      let key: string | undefined;
      if (rule.scope === RateLimitScope.API_KEY) key = principal?.keyId;
      else if (rule.scope === RateLimitScope.ACCOUNT) key = principal && `${principal.accountId}/${principal.environment}`;
      // Per network rather than address: an IPv6 client can send from any address of its /64. And per account
      // and environment: the clients of one account (a shared NAT, an edge function's egress) must not use up
      // another's quota from the same address, whose publishable key anyone can read.
      else if (rule.scope === RateLimitScope.CLIENT_IP) {
        const network = clientNetwork(context.clientIp);
        key = principal ? `${principal.accountId}/${principal.environment}/${network}` : network;
      }
      if (key === undefined) continue;
      const limit = principal?.rateLimitOverrides[rule.name] ?? installationOverrides[rule.name] ?? rule.limit;
      // Only client networks may be forgotten past the limiter's cap: keys and accounts are as many as the operator made.
      const check = { name: rule.name, key, limit, windowMs: rule.windowSeconds * 1000, evictable: rule.scope === RateLimitScope.CLIENT_IP };
      checks.push(check);
      if (!rule.countsRefused) refundable.push(check);
    }
    const outcome = limiter.consume(checks);
    const headers = rateLimitHeaders(outcome);
    if (!outcome.allowed) {
      const error = apiError(
        "RATE_LIMIT_EXCEEDED",
        `rate limit exceeded; retry in ${outcome.retryAfterSeconds} s`,
        { retryAfterSeconds: outcome.retryAfterSeconds },
      );
      for (const [name, value] of headers) error.metadata.set(name, value);
      throw error;
    }
    // The call counted: its answer says what is left, whether the handler succeeds or refuses it (404, 409),
    // or fails (500: the error interceptor adds them, as the fault carries no headers here).
    context.rateLimitHeaders = headers;
    let res;
    try {
      res = await next(req);
    } catch (error) {
      // Given back: the call uses up nothing of the limits that do not count refused calls; the answer's
      // headers say what is left.
      const giveBack = (): Array<[string, string]> => {
        if (refundable.length === 0) return headers;
        const released = limiter.release(refundable, outcome.admittedAt);
        return refundable.length === checks.length ? rateLimitHeaders(released) : headers;
      };
      if (error instanceof AtCapacityError) {
        // Turned away because a queue was full. A limit that counts refused calls keeps it: what it bounds
        // may have run already (a draft backtest compiles its rules before it queues).
        const overload = overloadError(error);
        for (const [name, value] of giveBack()) overload.metadata.set(name, value);
        throw overload;
      }
      if (error instanceof ConnectError) {
        // Invalid after all (identifiers that name different decisions, say): as a call refused by the
        // contract's rules, it uses up nothing, unless a limit counts the work done before the refusal.
        const counted = describeError(error).code === "VALIDATION_ERROR" ? giveBack() : headers;
        for (const [name, value] of counted) error.metadata.set(name, value);
      }
      throw error;
    }
    for (const [name, value] of headers) res.header.set(name, value);
    return res;
  };
}

/** RateLimit-Policy and RateLimit headers (IETF httpapi-ratelimit-headers draft). */
function rateLimitHeaders(outcome: RateLimitOutcome): Array<[string, string]> {
  if (outcome.states.length === 0) return [];
  return [
    ["ratelimit-policy", outcome.states.map((s) => `"${s.name}";q=${s.limit};w=${s.windowSeconds}`).join(", ")],
    ["ratelimit", outcome.states.map((s) => `"${s.name}";r=${s.remaining};t=${s.resetSeconds}`).join(", ")],
  ];
}

/** Enforces the (fraud.v1.validate) rules of the request message. */
function validationInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (!req.stream && contractOf(req.method)) {
      const violations = validateMessage(req.method.input, req.message);
      if (violations.length > 0) throw invalidRequest(violations);
    }
    return next(req);
  };
}

export function apiInterceptors(deps: {
  logger: Logger;
  keys: KeyService;
  limiter: RateLimiter;
  rateLimitOverrides: Readonly<Record<string, number>>;
  calls: RunningCalls;
}): Interceptor[] {
  // Connect applies the first interceptor outermost.
  return [
    errorInterceptor(deps.logger),
    authInterceptor(deps.keys),
    // An invalid request is refused before it is counted: a typo does not cost the caller its quota.
    validationInterceptor(),
    rateLimitInterceptor(deps.limiter, deps.rateLimitOverrides),
    // Innermost: the handler itself is what a deadline cuts short, and what shutdown waits for.
    deps.calls.interceptor,
  ];
}
