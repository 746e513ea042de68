import http from "node:http";
import type http2 from "node:http2";
import {
  ScalarType,
  fromJson,
  toJson,
  toJsonString,
  type DescField,
  type DescMessage,
  type DescMethodUnary,
  type JsonObject,
  type JsonValue,
  type JsonWriteOptions,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type UnaryResponse } from "@connectrpc/connect";
import { ResponseShape } from "../../gen/fraud/v1/options_pb.js";
import type { CallContext } from "../api/context.js";
import { allContracts, type MethodContract } from "../api/contract.js";
import { apiError, describeError } from "../api/errors.js";
import { decodePlainJson } from "../api/json-decode.js";
import { SIXTY_FOUR_BIT, jsonShapeViolations } from "../api/json-shape.js";
import { notPercentEncoding, percentDecoded, queryParameters, repeatedParameter, unknownParameter } from "../api/query-parameters.js";
import type { UnaryInvoker } from "../api/unary-invoker.js";
import { invalidRequest } from "../api/validation.js";
import { ClientGoneError, NotUtf8Error, dropBody, expectsContinue, readBody, strictUtf8 } from "./request-body.js";
import { PROTOTYPE_KEY, structureProblem } from "./json-keys.js";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Nesting deeper than this in a JSON body is refused before it reaches the decoder. */
const MAX_JSON_DEPTH = 32;

/** Request headers the gateway passes on to the RPC handlers. */
const FORWARDED_HEADERS = ["x-api-key", "authorization", "idempotency-key", "user-agent", "origin"];
/** Response headers the gateway passes back from the RPC handlers. */
const RETURNED_HEADERS = ["ratelimit", "ratelimit-policy", "retry-after", "x-request-id", "fraud-error-code"];

interface RestRoute {
  contract: MethodContract;
  method: DescMethodUnary;
  verb: string;
  template: string;
  pattern: RegExp;
  /** Path parameters in order, each the request field it binds. */
  pathFields: DescField[];
}

export type RouteMatch =
  | { kind: "route"; route: RestRoute; params: string[] }
  /** The path is known, the verb is not one of its routes'; `template` names the path (metrics, logs). */
  | { kind: "wrong-method"; allowed: string[]; template: string }
  | { kind: "none" };

export interface RestGatewayOptions {
  maxBodyBytes: number;
  /** The router's JSON options, so REST writes what Connect JSON writes. */
  jsonOptions: Partial<JsonWriteOptions>;
}

/**
 * The REST JSON API of the specification, generated from the `(fraud.v1.http)`
 * option of each RPC. A REST call runs the very implementation the Connect
 * router serves, through the same interceptors (errors, auth, rate limits,
 * validation) in the same order, so every protocol shares them; only reading
 * the JSON body, the envelope and the status mapping live here. It calls the
 * implementation directly rather than through a Connect JSON request, which
 * would serialise the input and output once more and build a request, a
 * response stream, linked abort signals and an AbortError per call
 * (docs/benchmarks.md).
 */
export class RestGateway {
  private readonly routes: RestRoute[] = [];

  constructor(
    private readonly invoker: UnaryInvoker,
    private readonly options: RestGatewayOptions,
  ) {
    for (const contract of allContracts()) {
      const method = contract.method;
      if (!invoker.serves(method)) continue;
      const pathFields: DescField[] = [];
      const pattern = contract.http.path.replace(/\{(\w+)\}/g, (_, name: string) => {
        const field = contract.method.input.fields.find((f) => f.jsonName === name);
        if (!field) throw new Error(`${contract.http.path}: {${name}} is not a field of ${contract.method.input.typeName}`);
        pathFields.push(field);
        return "([^/]+)";
      });
      this.routes.push({
        contract,
        method,
        verb: contract.http.method,
        template: contract.http.path,
        pattern: new RegExp(`^${pattern}$`),
        pathFields,
      });
    }
  }

  match(verb: string, pathname: string): RouteMatch {
    const allowed: string[] = [];
    let template = "";
    for (const route of this.routes) {
      const found = route.pattern.exec(pathname);
      if (!found) continue;
      // HEAD is GET without the body (Node's HTTP servers leave the body out of a HEAD answer).
      if (route.verb === verb || (verb === "HEAD" && route.verb === "GET")) return { kind: "route", route, params: found.slice(1) };
      allowed.push(route.verb);
      if (route.verb === "GET") allowed.push("HEAD");
      template ||= route.template;
    }
    return allowed.length > 0 ? { kind: "wrong-method", allowed, template } : { kind: "none" };
  }

  /** Serves one matched REST call; always answers, never throws. */
  async serve(match: Extract<RouteMatch, { kind: "route" }>, req: NodeRequest, res: NodeResponse, context: CallContext, url: URL): Promise<void> {
    const { route } = match;
    const { method } = route;
    let message;
    try {
      const input = await this.readInput(route, match.params, req, url);
      message = decodeInput(method.input, input);
    } catch (error) {
      if (!(error instanceof ClientGoneError)) this.writeError(res, context, ConnectError.from(error));
      return;
    }

    const abort = new AbortController();
    // Only a client that went away mid-call aborts it (an AbortError is costly to build).
    res.once("close", () => {
      if (!res.writableEnded) abort.abort();
    });
    const header = new Headers();
    for (const name of FORWARDED_HEADERS) {
      const value = req.headers[name];
      if (typeof value === "string") header.set(name, value);
    }
    let response: UnaryResponse;
    try {
      // REST has no deadline header: the call's signal is the client's going away.
      response = await this.invoker.invoke({
        method,
        message,
        header,
        signal: abort.signal,
        timeoutMs: () => undefined,
        protocolName: "rest",
        requestMethod: req.method ?? "POST",
        url: url.href,
        context,
      });
    } catch (error) {
      this.writeError(res, context, context.error ?? ConnectError.from(error));
      return;
    }
    for (const name of RETURNED_HEADERS) {
      const value = response.header.get(name);
      if (value) res.setHeader(name, value);
    }
    this.writeSuccess(res, context, route.contract, method.output, response.message);
  }

  private writeSuccess(res: NodeResponse, context: CallContext, contract: MethodContract, schema: DescMessage, output: UnaryResponse["message"]): void {
    const created = contract.createdProperty !== undefined && (output as Record<string, unknown>)[contract.createdProperty] === true;
    const status = created ? 201 : contract.http.successStatus || 200;
    if (contract.responseShape === ResponseShape.EMPTY) {
      res.writeHead(status, { "cache-control": NO_STORE });
      res.end();
      return;
    }
    const data = contract.http.responseBody
      ? // Get-one operations: lift one field out of the response.
        JSON.stringify((toJson(schema, output, this.options.jsonOptions) as JsonObject)[contract.http.responseBody] ?? null)
      : toJsonString(schema, output, this.options.jsonOptions);
    const text =
      contract.responseShape === ResponseShape.BARE
        ? data
        : `{"success":true,"data":${data},"meta":${JSON.stringify(meta(context))}}`;
    writeJson(res, status, text);
  }

  writeError(res: NodeResponse, context: CallContext, error: ConnectError): void {
    context.error ??= error;
    const answer = errorAnswer(context, error);
    for (const [name, value] of answer.headers) res.setHeader(name, value);
    // The rest of an oversized HTTP/1.1 body is not worth reading: close instead.
    if (answer.status === 413 && !("stream" in res)) res.setHeader("connection", "close");
    writeJson(res, answer.status, answer.body);
  }

  /**
   * A call whose caller the dispatcher refused before its body was read (admitCaller) is answered at once. Over HTTP/1.1 Node drops the
   * rest of the body after the answer, so that the requests pipelined behind it stay readable: up to the size
   * limit (dropBody), past which the connection is closed, as after a 413, rather than read for as long as the
   * client sends.
   */
  refuseUnread(req: NodeRequest, res: NodeResponse, context: CallContext, error: ConnectError): void {
    // A body held back for a 100 Continue (which a refusal never sends) never comes; the dispatcher closes the
    // connection after the answer.
    if (!("stream" in res) && !req.complete && !expectsContinue(req)) {
      const { maxBodyBytes } = this.options;
      if (Number(req.headers["content-length"] ?? NaN) > maxBodyBytes) {
        res.setHeader("connection", "close");
      } else {
        // Found over the limit once its answer went out (keep-alive): the connection ends after that answer.
        const socket = req.socket;
        void dropBody(req, maxBodyBytes).then((outcome) => {
          if (outcome !== "over-limit") return;
          if (res.writableFinished) socket.destroySoon();
          else res.once("finish", () => socket.destroySoon());
        });
      }
    }
    this.writeError(res, context, error);
  }

  private async readInput(route: RestRoute, params: string[], req: NodeRequest, url: URL): Promise<JsonObject> {
    const hasBody = route.verb === "POST" || route.verb === "PUT" || route.verb === "PATCH";
    const input: JsonObject = hasBody ? await this.readJsonBody(req) : {};
    if (!hasBody) Object.assign(input, queryToInput(route, url));
    else if (url.search.length > 1) {
      throw apiError("VALIDATION_ERROR", `${route.verb} ${route.template} takes no query parameters`);
    }
    route.pathFields.forEach((field, i) => {
      const value = percentDecoded(params[i] as string);
      if (value === undefined) throw notPercentEncoding("path", field.jsonName);
      // Path segments are text: a number field (a version) takes its value as a query parameter would.
      const converted = convertParameter(field, value, "path");
      const inBody = input[field.jsonName];
      // Compared as text: a 64-bit integer may be a JSON number in the body and text in the path.
      if (inBody !== undefined && String(inBody) !== String(converted)) {
        throw apiError("VALIDATION_ERROR", `${field.jsonName} in the body differs from the path`, {
          fieldViolations: [{ field: field.jsonName, description: "differs from the path" }],
        });
      }
      input[field.jsonName] = converted;
    });
    // With the path's values bound: a version past its type's range is named as any field is.
    const shape = jsonShapeViolations(route.contract.method.input, input);
    if (route.verb === "PATCH") shape.push(...emptyListsInUpdate(route.contract.method.input, input));
    if (shape.length > 0) throw invalidRequest(shape);
    return input;
  }

  private async readJsonBody(req: NodeRequest): Promise<JsonObject> {
    const { maxBodyBytes } = this.options;
    const declared = Number(req.headers["content-length"] ?? NaN);
    if (declared > maxBodyBytes) throw tooLarge(maxBodyBytes);
    const body = await readBody(req, maxBodyBytes, () => tooLarge(maxBodyBytes));
    if (body.length === 0) return {};
    const contentType = req.headers["content-type"] ?? "";
    if (!/^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(contentType)) {
      throw apiError("UNSUPPORTED_MEDIA_TYPE", `request bodies must be JSON with Content-Type: application/json, got "${contentType || "none"}"`);
    }
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType)?.[1];
    if (charset !== undefined && !/^utf-?8$/i.test(charset)) {
      throw apiError("UNSUPPORTED_MEDIA_TYPE", `request bodies must be UTF-8 JSON, got charset=${charset}`);
    }
    const encoding = req.headers["content-encoding"]?.trim();
    if (encoding !== undefined && encoding !== "" && encoding.toLowerCase() !== "identity") {
      throw apiError("UNSUPPORTED_MEDIA_TYPE", `request bodies are read uncompressed: Content-Encoding ${encoding} is not supported`);
    }
    let parsed: unknown;
    let text: string;
    try {
      text = strictUtf8.decode(body);
      parsed = JSON.parse(text);
    } catch (error) {
      if (error instanceof NotUtf8Error) throw apiError("VALIDATION_ERROR", error.message);
      throw apiError("VALIDATION_ERROR", `request body is not valid JSON: ${(error as Error).message}`);
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      throw apiError("VALIDATION_ERROR", `request body must be a JSON object, got ${Array.isArray(parsed) ? "an array" : parsed === null ? "null" : typeof parsed}`);
    }
    const problem = structureProblem(text, MAX_JSON_DEPTH);
    if (problem?.kind === "too-deep") throw apiError("VALIDATION_ERROR", `request body is nested deeper than ${MAX_JSON_DEPTH} levels`);
    if (problem?.kind === "repeated-key") {
      throw apiError("VALIDATION_ERROR", `request body repeats the key ${JSON.stringify(problem.key)} in one object: which one was meant cannot be told`);
    }
    if (problem?.kind === "prototype-key") {
      const field = pathOfKey(parsed, PROTOTYPE_KEY) ?? PROTOTYPE_KEY;
      throw apiError("VALIDATION_ERROR", `request body holds the key "${PROTOTYPE_KEY}" at ${field}: no object of it may, since it would be read as the object's prototype and dropped`, {
        fieldViolations: [{ field, description: `is a key no object may have` }],
      });
    }
    return parsed as JsonObject;
  }
}

function tooLarge(limit: number): ConnectError {
  return apiError("PAYLOAD_TOO_LARGE", `request body exceeds the limit of ${limit} bytes`);
}

/** Binds query parameters to request fields by JSON name, converting by field type. */
function queryToInput(route: RestRoute, url: URL): JsonObject {
  const input: JsonObject = {};
  const fields = route.contract.method.input.fields;
  for (const [name, raws] of queryParameters(url.search)) {
    const field = fields.find((f) => f.jsonName === name || f.name === name);
    if (!field || route.pathFields.includes(field) || field.fieldKind === "message" || field.fieldKind === "map") {
      throw unknownParameter(name);
    }
    const values = raws.map((raw) => convertParameter(field, raw, "query"));
    if (field.fieldKind !== "list" && values.length > 1) {
      // (The last one silently winning hid a mistake.)
      throw repeatedParameter(name, values.length, field.jsonName);
    }
    input[field.jsonName] = field.fieldKind === "list" ? values : (values[0] as JsonValue);
  }
  return input;
}

/** A query or path parameter's text as the field's JSON value (a number for number fields, checked). */
function convertParameter(field: DescField, raw: string, where: "query" | "path"): JsonValue {
  const scalar = field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar") ? field.scalar : undefined;
  if (scalar === ScalarType.BOOL) {
    if (raw === "true" || raw === "false") return raw === "true";
    throw apiError("VALIDATION_ERROR", `${where} parameter ${field.jsonName} must be true or false`, {
      fieldViolations: [{ field: field.jsonName, description: "must be true or false" }],
    });
  }
  if (scalar !== undefined && scalar !== ScalarType.STRING && scalar !== ScalarType.BYTES) {
    // Decimal notation only: Number() would also take " 5", "0x10" and "1e1" for an integer.
    const integer = scalar !== ScalarType.DOUBLE && scalar !== ScalarType.FLOAT;
    const value = Number(raw);
    if (!(integer ? /^-?\d+$/ : /^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$/).test(raw) || !Number.isFinite(value)) {
      const description = integer ? "must be a whole number in decimal digits" : "must be a number";
      throw apiError("VALIDATION_ERROR", `${where} parameter ${field.jsonName} ${description}`, {
        fieldViolations: [{ field: field.jsonName, description }],
      });
    }
    // A 64-bit integer stays text, as protobuf JSON writes it: a double cannot hold them all.
    return SIXTY_FOUR_BIT.has(scalar) ? raw : value;
  }
  return raw;
}

/** A refused call's REST answer (part 2.1): its status, the headers that go with it and the error envelope. */
export interface ErrorAnswer {
  status: number;
  code: string;
  headers: ReadonlyMap<string, string>;
  body: string;
}

/** The one error answer of the REST API, and of the event stream's refused upgrades. */
export function errorAnswer(context: CallContext, error: ConnectError): ErrorAnswer {
  const described = describeError(error);
  const details: Record<string, unknown> = {};
  const headers = new Map<string, string>();
  if (described.detail.fieldViolations.length > 0) {
    details.fieldViolations = described.detail.fieldViolations.map((v) => ({ field: v.field, description: v.description }));
  }
  if (described.detail.retryAfterSeconds > 0) {
    details.retryAfterSeconds = described.detail.retryAfterSeconds;
    headers.set("retry-after", String(described.detail.retryAfterSeconds));
  }
  for (const [name, value] of error.metadata) {
    if (RETURNED_HEADERS.includes(name)) headers.set(name, value);
  }
  headers.set("x-request-id", context.requestId);
  const body = { success: false, error: { code: described.code, message: described.message, details }, meta: meta(context) };
  return { status: described.httpStatus, code: described.code, headers, body: JSON.stringify(body) };
}

function meta(context: CallContext): { requestId: string; latencyMs: number } {
  return { requestId: context.requestId, latencyMs: Math.round((performance.now() - context.startedAt) * 1000) / 1000 };
}

/**
 * Every answer is an account's data, or says something about a key: no cache keeps it (a shared one keys on
 * the URL, while the key travels in a header).
 */
const NO_STORE = "no-store";

/** The headers of every JSON answer. */
function jsonHeaders(text: string): Record<string, string> {
  return { "content-type": "application/json; charset=utf-8", "content-length": String(Buffer.byteLength(text)), "cache-control": NO_STORE };
}

function writeJson(res: NodeResponse, status: number, text: string): void {
  res.writeHead(status, jsonHeaders(text));
  res.end(text);
}

/**
 * An error answer as the bytes written on a raw HTTP/1.1 connection no response object owns (a refused
 * WebSocket upgrade, a request Node could not read), with `Connection: close`: the connection ends with it.
 */
export function rawErrorAnswer(answer: ErrorAnswer, headers: Record<string, string> = {}): string {
  const lines = [
    `HTTP/1.1 ${answer.status} ${http.STATUS_CODES[answer.status] ?? answer.code}`,
    ...[...Object.entries(jsonHeaders(answer.body)), ...answer.headers, ...Object.entries(headers)].map(([name, value]) => `${name}: ${value}`),
    "connection: close",
  ];
  return `${lines.join("\r\n")}\r\n\r\n${answer.body}`;
}

/**
 * The request message from its checked JSON (plain bodies without protobuf-es's reflection, json-decode.ts),
 * failing as Connect JSON fails on input it cannot decode.
 */
function decodeInput(schema: DescMessage, input: JsonObject) {
  try {
    return decodePlainJson(schema, input) ?? fromJson(schema, input, { ignoreUnknownFields: true });
  } catch (error) {
    throw ConnectError.from(error, Code.InvalidArgument);
  }
}

/** The JSON path of the first own `key` in `value` (objects and arrays, depth first), if any. */
function pathOfKey(value: unknown, key: string, path = ""): string | undefined {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = pathOfKey(value[i], key, `${path}[${i}]`);
      if (found !== undefined) return found;
    }
  } else if (typeof value === "object" && value !== null) {
    for (const child of Object.keys(value)) {
      const childPath = path === "" ? child : `${path}.${child}`;
      if (child === key) return childPath;
      const found = pathOfKey((value as Record<string, unknown>)[child], key, childPath);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

/**
 * A PATCH changes the fields its body names. Protobuf cannot tell an empty list from one left out, so a
 * list sent empty would change nothing while the caller meant to clear it (or, for a webhook's events, to
 * subscribe to all of them): refused, rather than answered 200 with nothing changed.
 */
function emptyListsInUpdate(schema: DescMessage, input: JsonObject): Array<{ field: string; description: string }> {
  return schema.fields
    .filter((field) => field.fieldKind === "list" && Array.isArray(input[field.jsonName]) && (input[field.jsonName] as JsonValue[]).length === 0)
    .map((field) => ({ field: field.jsonName, description: "must not be an empty list in an update, where it cannot be told from a list left out and would change nothing" }));
}
