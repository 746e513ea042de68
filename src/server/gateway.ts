import type http from "node:http";
import type http2 from "node:http2";
import { ScalarType, type DescField, type DescMethod, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { ResponseShape } from "../../gen/fraud/v1/options_pb.js";
import { withCallContext, type CallContext } from "../api/context.js";
import { allContracts, type MethodContract } from "../api/contract.js";
import { apiError, describeError } from "../api/errors.js";
import { jsonShapeViolations } from "../api/json-shape.js";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Nesting deeper than this in a JSON body is refused before it reaches the decoder. */
const MAX_JSON_DEPTH = 32;

/** Request headers the gateway passes on to the RPC handlers. */
const FORWARDED_HEADERS = ["x-api-key", "authorization", "idempotency-key", "user-agent"];
/** Response headers the gateway passes back from the RPC handlers. */
const RETURNED_HEADERS = ["ratelimit", "ratelimit-policy", "retry-after", "x-request-id", "fraud-error-code"];

interface RestRoute {
  contract: MethodContract;
  verb: string;
  template: string;
  pattern: RegExp;
  /** Path parameters in order, each the request field it binds. */
  pathFields: DescField[];
  handler: UniversalHandler;
}

export type RouteMatch =
  | { kind: "route"; route: RestRoute; params: string[] }
  | { kind: "wrong-method"; allowed: string[] }
  | { kind: "none" };

/**
 * The REST JSON API of the specification, generated from the `(fraud.v1.http)`
 * option of each RPC. A REST call becomes a Connect JSON call on the very same
 * handler, so interceptors (auth, rate limits, validation) and handlers are
 * shared with gRPC and Connect; only the envelope and status mapping live here.
 */
export class RestGateway {
  private readonly routes: RestRoute[] = [];

  constructor(
    handlers: readonly UniversalHandler[],
    private readonly maxBodyBytes: number,
  ) {
    const byMethod = new Map<DescMethod, UniversalHandler>();
    // The router holds one handler per RPC; any serves Connect JSON.
    for (const handler of handlers) byMethod.set(handler.method, handler);
    for (const contract of allContracts()) {
      const handler = byMethod.get(contract.method);
      if (!handler) continue;
      const pathFields: DescField[] = [];
      const pattern = contract.http.path.replace(/\{(\w+)\}/g, (_, name: string) => {
        const field = contract.method.input.fields.find((f) => f.jsonName === name);
        if (!field) throw new Error(`${contract.http.path}: {${name}} is not a field of ${contract.method.input.typeName}`);
        pathFields.push(field);
        return "([^/]+)";
      });
      this.routes.push({
        contract,
        verb: contract.http.method,
        template: contract.http.path,
        pattern: new RegExp(`^${pattern}$`),
        pathFields,
        handler,
      });
    }
  }

  match(verb: string, pathname: string): RouteMatch {
    const allowed: string[] = [];
    for (const route of this.routes) {
      const found = route.pattern.exec(pathname);
      if (!found) continue;
      if (route.verb === verb) return { kind: "route", route, params: found.slice(1) };
      allowed.push(route.verb);
    }
    return allowed.length > 0 ? { kind: "wrong-method", allowed } : { kind: "none" };
  }

  /** Serves one matched REST call; always answers, never throws. */
  async serve(match: Extract<RouteMatch, { kind: "route" }>, req: NodeRequest, res: NodeResponse, context: CallContext, url: URL): Promise<void> {
    const { route } = match;
    let input: JsonObject;
    try {
      input = await this.readInput(route, match.params, req, url);
    } catch (error) {
      this.writeError(res, context, ConnectError.from(error));
      return;
    }

    const header = new Headers({ "content-type": "application/json" });
    for (const name of FORWARDED_HEADERS) {
      const value = req.headers[name];
      if (typeof value === "string") header.set(name, value);
    }
    const abort = new AbortController();
    // Only a client that went away mid-call aborts it (an AbortError is costly to build).
    res.once("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    let response: UniversalServerResponse;
    try {
      response = await route.handler({
        httpVersion: req.httpVersion,
        url: `http://gateway${route.handler.requestPath}`,
        method: "POST",
        header,
        body: input,
        signal: abort.signal,
        contextValues: withCallContext(createContextValues(), context),
      });
    } catch (error) {
      this.writeError(res, context, ConnectError.from(error));
      return;
    }
    const body = await readAll(response.body);
    for (const name of RETURNED_HEADERS) {
      const value = response.header?.get(name);
      if (value) res.setHeader(name, value);
    }
    if (response.status !== 200) {
      this.writeError(res, context, context.error ?? errorFromJsonBytes(body, response.header, apiError("INTERNAL_ERROR", "internal error")));
      return;
    }
    this.writeSuccess(res, context, route.contract, body);
  }

  private writeSuccess(res: NodeResponse, context: CallContext, contract: MethodContract, body: Uint8Array): void {
    const status = contract.http.successStatus || 200;
    if (contract.responseShape === ResponseShape.EMPTY) {
      res.writeHead(status);
      res.end();
      return;
    }
    let data = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("utf8");
    if (contract.http.responseBody) {
      // Rare, non-hot path (get-one operations): lift one field out of the response.
      const whole = JSON.parse(data) as JsonObject;
      data = JSON.stringify(whole[contract.http.responseBody] ?? null);
    }
    const text =
      contract.responseShape === ResponseShape.BARE
        ? data
        : `{"success":true,"data":${data},"meta":${JSON.stringify(meta(context))}}`;
    writeJson(res, status, text);
  }

  writeError(res: NodeResponse, context: CallContext, error: ConnectError): void {
    context.error ??= error;
    const described = describeError(error);
    const details: Record<string, unknown> = {};
    if (described.detail.fieldViolations.length > 0) {
      details.fieldViolations = described.detail.fieldViolations.map((v) => ({ field: v.field, description: v.description }));
    }
    if (described.detail.retryAfterSeconds > 0) {
      details.retryAfterSeconds = described.detail.retryAfterSeconds;
      res.setHeader("retry-after", String(described.detail.retryAfterSeconds));
    }
    for (const [name, value] of error.metadata) {
      if (RETURNED_HEADERS.includes(name)) res.setHeader(name, value);
    }
    res.setHeader("x-request-id", context.requestId);
    // The rest of an oversized HTTP/1.1 body is not worth reading: close instead.
    if (described.httpStatus === 413 && !("stream" in res)) res.setHeader("connection", "close");
    const body = {
      success: false,
      error: { code: described.code, message: described.message, details },
      meta: meta(context),
    };
    writeJson(res, described.httpStatus, JSON.stringify(body));
  }

  private async readInput(route: RestRoute, params: string[], req: NodeRequest, url: URL): Promise<JsonObject> {
    const hasBody = route.verb === "POST" || route.verb === "PUT" || route.verb === "PATCH";
    const input: JsonObject = hasBody ? await this.readJsonBody(req) : {};
    if (!hasBody) Object.assign(input, queryToInput(route, url));
    else if (url.search.length > 1) {
      throw apiError("VALIDATION_ERROR", `${route.verb} ${route.template} takes no query parameters`);
    }
    const shape = jsonShapeViolations(route.contract.method.input, input);
    if (shape.length > 0) {
      const summary = shape.map((v) => `${v.field} ${v.description}`).join("; ");
      throw apiError("VALIDATION_ERROR", `invalid request: ${summary}`, { fieldViolations: shape });
    }
    route.pathFields.forEach((field, i) => {
      let value: string;
      try {
        value = decodeURIComponent(params[i] as string);
      } catch {
        throw apiError("VALIDATION_ERROR", `path parameter ${field.jsonName} is not valid percent-encoding`, {
          fieldViolations: [{ field: field.jsonName, description: "is not valid percent-encoding" }],
        });
      }
      const inBody = input[field.jsonName];
      if (inBody !== undefined && inBody !== value) {
        throw apiError("VALIDATION_ERROR", `${field.jsonName} in the body differs from the path`, {
          fieldViolations: [{ field: field.jsonName, description: "differs from the path" }],
        });
      }
      input[field.jsonName] = value;
    });
    return input;
  }

  private async readJsonBody(req: NodeRequest): Promise<JsonObject> {
    const declared = Number(req.headers["content-length"] ?? NaN);
    if (declared > this.maxBodyBytes) throw tooLarge(this.maxBodyBytes);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > this.maxBodyBytes) throw tooLarge(this.maxBodyBytes);
      chunks.push(chunk);
    }
    if (size === 0) return {};
    const contentType = req.headers["content-type"] ?? "";
    if (!/^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(contentType)) {
      throw apiError("UNSUPPORTED_MEDIA_TYPE", `request bodies must be JSON with Content-Type: application/json, got "${contentType || "none"}"`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.concat(chunks, size).toString("utf8"));
    } catch (error) {
      throw apiError("VALIDATION_ERROR", `request body is not valid JSON: ${(error as Error).message}`);
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      throw apiError("VALIDATION_ERROR", `request body must be a JSON object, got ${Array.isArray(parsed) ? "an array" : parsed === null ? "null" : typeof parsed}`);
    }
    if (depthExceeds(parsed, MAX_JSON_DEPTH)) {
      throw apiError("VALIDATION_ERROR", `request body is nested deeper than ${MAX_JSON_DEPTH} levels`);
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
  for (const name of new Set(url.searchParams.keys())) {
    const field = fields.find((f) => f.jsonName === name || f.name === name);
    if (!field || route.pathFields.includes(field) || field.fieldKind === "message" || field.fieldKind === "map") {
      throw apiError("VALIDATION_ERROR", `unknown query parameter ${name}`, {
        fieldViolations: [{ field: name, description: "is not a parameter of this endpoint" }],
      });
    }
    const values = url.searchParams.getAll(name).map((raw) => convertQueryValue(field, raw));
    input[field.jsonName] = field.fieldKind === "list" ? values : (values[values.length - 1] as JsonValue);
  }
  return input;
}

function convertQueryValue(field: DescField, raw: string): JsonValue {
  const scalar = field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar") ? field.scalar : undefined;
  if (scalar === ScalarType.BOOL) {
    if (raw === "true" || raw === "false") return raw === "true";
    throw apiError("VALIDATION_ERROR", `query parameter ${field.jsonName} must be true or false`, {
      fieldViolations: [{ field: field.jsonName, description: "must be true or false" }],
    });
  }
  if (scalar !== undefined && scalar !== ScalarType.STRING && scalar !== ScalarType.BYTES) {
    const value = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(value)) {
      throw apiError("VALIDATION_ERROR", `query parameter ${field.jsonName} must be a number`, {
        fieldViolations: [{ field: field.jsonName, description: "must be a number" }],
      });
    }
    return value;
  }
  return raw;
}

function depthExceeds(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop() as [unknown, number];
    if (typeof current !== "object" || current === null) continue;
    if (depth > max) return true;
    for (const child of Object.values(current)) stack.push([child, depth + 1]);
  }
  return false;
}

function meta(context: CallContext): { requestId: string; latencyMs: number } {
  return { requestId: context.requestId, latencyMs: Math.round((performance.now() - context.startedAt) * 1000) / 1000 };
}

function writeJson(res: NodeResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

async function readAll(body: AsyncIterable<Uint8Array> | undefined): Promise<Uint8Array> {
  if (!body) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return chunks.length === 1 ? (chunks[0] as Uint8Array) : Buffer.concat(chunks);
}
