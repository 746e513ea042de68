import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { DecisionService, DecideRequestSchema, DecideResponseSchema } from "../gen/fraud/v1/decision_pb.js";
import { ErrorDetailSchema } from "../gen/fraud/v1/errors_pb.js";
import { ListService } from "../gen/fraud/v1/list_pb.js";
import { grpcClient, grpcUnary } from "./helpers/grpc.js";
import { startTestServer, type TestServer } from "./helpers/server.js";
import { pumpUpload } from "./helpers/upload.js";

let server: TestServer;
let secret: string;
let publishable: string;

interface ErrorBody {
  success: false;
  error: { code: string; message: string; details: { fieldViolations?: Array<{ field: string; description: string }> } };
  meta: { requestId: string; latencyMs: number };
}

beforeAll(async () => {
  server = await startTestServer({ config: { maxBodyBytes: 4096 } });
  const account = server.createAccount();
  secret = account.keys.test.secret;
  publishable = account.keys.test.publishable;
});
afterAll(() => server.close());

async function post(path: string, body: string | Buffer, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": secret, ...headers },
    body,
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as ErrorBody };
}

describe("bad input gets a precise 4xx, never a 500", () => {
  it("accepts a userId of exactly 256 characters, the limit itself", async () => {
    const res = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": secret },
      body: JSON.stringify({ userId: "x".repeat(256), action: "login" }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { success: boolean }).success).toBe(true);
  });

  it("names every offending field of a decide request", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ action: "teleport", userId: "x".repeat(257), ip: "999.1.1.1", currency: "usd" }));
    expect(status).toBe(400);
    expect(body.success).toBe(false);
    expect(body.error.code).toBe("VALIDATION_ERROR");
    expect(body.meta.requestId).toMatch(/^req_/);
    expect(body.error.details.fieldViolations).toEqual([
      { field: "userId", description: "must be at most 256 characters" },
      { field: "action", description: expect.stringContaining("must be one of login, signup") },
      { field: "ip", description: "must be an IPv4 or IPv6 address" },
      { field: "currency", description: "must be an ISO 4217 code of three upper-case letters" },
    ]);
  });

  it("reports missing required fields", async () => {
    const { status, body } = await post("/api/v1/decide", "{}");
    expect(status).toBe(400);
    expect(body.error.details.fieldViolations?.map((v) => v.field)).toEqual(["userId", "action"]);
  });

  it("checks nested messages with their JSON path", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userId: "u", action: "login", behavior: { timeOnPageMs: -5 } }));
    expect(status).toBe(400);
    expect(body.error.details.fieldViolations).toEqual([{ field: "behavior.timeOnPageMs", description: "must be at least 0" }]);
  });

  it("refuses malformed JSON", async () => {
    const { status, body } = await post("/api/v1/decide", '{"userId": "u",');
    expect(status).toBe(400);
    expect(body.error.code).toBe("VALIDATION_ERROR");
    expect(body.error.message).toMatch(/not valid JSON/);
  });

  it("refuses a key repeated in one object, as Connect does, recording nothing", async () => {
    const before = (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n;
    const { status, body } = await post("/api/v1/decide", '{"userId":"victim","action":"login","userId":"decoy"}');
    expect(status).toBe(400);
    expect(body.error.code).toBe("VALIDATION_ERROR");
    expect(body.error.message).toBe('request body repeats the key "userId" in one object: which one was meant cannot be told');
    expect((await post("/api/v1/decide", '{"userId":"u","action":"login","metadata":{"a":1,"a":2}}')).status).toBe(400);
    expect((server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n).toBe(before);
  });

  it("takes a field under its proto name as the protobuf JSON mapping does, and refuses it under both names", async () => {
    const before = (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n;
    const both = await post("/api/v1/decide", '{"userId":"victim","action":"login","user_id":"decoy"}');
    expect(both.status).toBe(400);
    expect(both.body.error.code).toBe("VALIDATION_ERROR");
    expect(both.body.error.message).toBe("cannot decode field fraud.v1.DecideRequest.user_id from JSON: set multiple times");
    expect((server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n).toBe(before);
    const protoName = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": secret },
      body: JSON.stringify({ user_id: "proto_named_user", action: "login", user_agent: "curl/8.5.0" }),
    });
    expect(protoName.status).toBe(200);
    const stored = server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'proto_named_user'").get() as { n: number };
    expect(stored.n).toBe(1);
  });

  it("refuses the key __proto__ anywhere in a body, naming where, instead of dropping it unread", async () => {
    const before = (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n;
    const cases: Array<[string, string]> = [
      ['{"userId":"u","action":"login","metadata":{"__proto__":{"x":1,"big":"' + "z".repeat(1_500) + '"},"constructor":2}}', "metadata.__proto__"],
      // Written with an escape, it is the same key.
      ['{"userId":"u","action":"login","metadata":{"tags":[{"ok":1},{"\\u005f_proto__":2}]}}', "metadata.tags[1].__proto__"],
      ['{"__proto__":{"userId":"u"},"action":"login"}', "__proto__"],
    ];
    for (const [payload, field] of cases) {
      const { status, body } = await post("/api/v1/decide", payload);
      expect(status, payload.slice(0, 80)).toBe(400);
      expect(body.error.code).toBe("VALIDATION_ERROR");
      expect(body.error.message).toMatch(new RegExp(`key "__proto__" at ${field.replace(/[.[\]]/g, "\\$&")}:`));
      expect(body.error.details.fieldViolations).toEqual([{ field, description: "is a key no object may have" }]);
    }
    // A value that says __proto__ is just a string.
    expect((await post("/api/v1/decide", '{"userId":"u","action":"login","metadata":{"note":"__proto__"}}')).status).toBe(200);
    expect((server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n).toBe(before + 1);
  });

  it("refuses a body that is not valid UTF-8 instead of replacing the bytes", async () => {
    const body = Buffer.concat([Buffer.from('{"userId":"'), Buffer.from([0xc3, 0x28]), Buffer.from('","action":"login"}')]);
    const { status, body: error } = await post("/api/v1/decide", body);
    expect(status).toBe(400);
    expect(error.error.message).toBe("request body is not valid UTF-8");
    // A byte order mark is allowed and ignored.
    expect((await post("/api/v1/decide", Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"userId":"bom","action":"login"}')]))).status).toBe(200);
  });

  it("refuses a lone surrogate written as a JSON escape: it has no UTF-8 form", async () => {
    for (const [payload, field] of [
      ['{"userId":"\\ud800","action":"login"}', "userId"],
      ['{"userId":"u","action":"login","device":{"languages":["en","\\udc00"]}}', "device.languages[1]"],
    ]) {
      const { status, body } = await post("/api/v1/decide", payload as string);
      expect(status).toBe(400);
      expect(body.error.code).toBe("VALIDATION_ERROR");
      expect(body.error.details.fieldViolations).toEqual([{ field, description: "must be valid Unicode text: it holds a lone UTF-16 surrogate" }]);
    }
    // Inside metadata too, whose strings and keys are the service's to check (protobuf JSON takes any there).
    for (const [payload, field] of [
      ['{"userId":"u","action":"login","metadata":{"a":"\\ud800"}}', "metadata.a"],
      ['{"userId":"u","action":"login","metadata":{"\\udc00k":1}}', "metadata"],
    ]) {
      const { status, body } = await post("/api/v1/decide", payload as string);
      expect(status, payload).toBe(400);
      expect(body.error.details.fieldViolations).toEqual([{ field, description: expect.stringMatching(/lone UTF-16 surrogate/) }]);
    }
    // A surrogate pair is a character like any other.
    expect((await post("/api/v1/decide", '{"userId":"\\ud83d\\ude00","action":"login"}')).status).toBe(200);
    expect((await post("/api/v1/decide", '{"userId":"u","action":"login","metadata":{"\\ud83d\\ude00":"\\ud83d\\ude00"}}')).status).toBe(200);
  });

  it("refuses a JSON array or scalar where an object belongs", async () => {
    for (const payload of ["[1,2]", "42", "null", '"text"']) {
      const { status, body } = await post("/api/v1/decide", payload);
      expect(status, payload).toBe(400);
      expect(body.error.message).toMatch(/must be a JSON object/);
    }
  });

  it("refuses wrong types and names the field", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userId: 42, action: "login" }));
    expect(status).toBe(400);
    expect(body.error.code).toBe("VALIDATION_ERROR");
    expect(body.error.details.fieldViolations).toEqual([{ field: "userId", description: "must be a string" }]);
  });

  it("refuses numbers sent as strings", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userId: "u", action: "checkout", amount: "5", currency: "EUR" }));
    expect(status).toBe(400);
    expect(body.error.details.fieldViolations).toEqual([{ field: "amount", description: "must be a number" }]);
  });

  it("refuses an array where an object belongs inside the body", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userId: "u", action: "login", device: [1] }));
    expect(status).toBe(400);
    expect(body.error.details.fieldViolations).toEqual([{ field: "device", description: "must be an object" }]);
  });

  it("refuses unknown fields, so typos do not pass silently", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userID: "u", action: "login" }));
    expect(status).toBe(400);
    expect(body.error.details.fieldViolations).toEqual([{ field: "userID", description: "is not a field of DecideRequest" }]);
  });

  it("refuses bodies over the documented limit with 413", async () => {
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userId: "u", action: "login", email: "x".repeat(5000) }));
    expect(status).toBe(413);
    expect(body.error.code).toBe("PAYLOAD_TOO_LARGE");
  });

  it("refuses an oversized body sent without Content-Length (chunked)", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": secret } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      for (let i = 0; i < 10; i++) req.write("x".repeat(1000));
      req.end();
    });
    expect(status).toBe(413);
  });

  it("drops a call whose client goes away before its body ends, and goes on serving", async () => {
    const logged = server.logs.length;
    await new Promise<void>((resolve) => {
      const socket = net.connect(server.port, "127.0.0.1", () => {
        socket.write(`POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nX-API-Key: ${secret}\r\n\r\n{"userId":`);
        setTimeout(() => socket.destroy(), 50);
      });
      socket.on("close", () => resolve());
    });
    const { status } = await post("/api/v1/decide", JSON.stringify({ userId: "after_abort", action: "login" }));
    expect(status).toBe(200);
    const lines = server.logs.slice(logged).map((line) => JSON.parse(line) as { level: string; status?: number });
    expect(lines.filter((line) => line.level === "error")).toEqual([]);
    // Logged as the client's doing, not as an answer it never got.
    expect(lines.filter((line) => line.status !== 200)).toEqual([expect.objectContaining({ level: "info", route: "POST /api/v1/decide", status: 499, code: "CANCELED" })]);
  });

  it("logs a call whose HTTP/2 client goes away before its body ends as 499 CANCELED too, over REST and gRPC", async () => {
    const logged = server.logs.length;
    const session = http2.connect(server.url);
    await new Promise((resolve) => session.once("connect", resolve));
    for (const [path, contentType] of [["/api/v1/decide", "application/json"], ["/fraud.v1.DecisionService/Decide", "application/grpc"]] as const) {
      const stream = session.request({ ":method": "POST", ":path": path, "content-type": contentType, "x-api-key": secret });
      stream.on("error", () => undefined);
      stream.write(contentType === "application/json" ? '{"userId":' : Buffer.from([0, 0, 0, 0, 40, 10]));
    }
    // A PING is answered only once the server has read every frame sent before it: both calls have begun there.
    await new Promise<void>((resolve, reject) => session.ping((error) => (error ? reject(error) : resolve())));
    session.destroy();
    await expect.poll(() => server.logs.slice(logged).length).toBeGreaterThanOrEqual(2);
    const lines = server.logs.slice(logged).map((line) => JSON.parse(line) as { route?: string; status?: number; code?: string });
    // Node's HTTP/2 answer reads as finished once its stream closes: these were logged 200 OK.
    const calls = lines.filter((line) => line.route !== undefined).map(({ route, status, code }) => ({ route, status, code }));
    expect(calls.sort((a, b) => String(a.route).localeCompare(String(b.route)))).toEqual([
      { route: "/fraud.v1.DecisionService/Decide", status: 499, code: "CANCELED" },
      { route: "POST /api/v1/decide", status: 499, code: "CANCELED" },
    ]);
  });

  it("refuses deeply nested bodies", async () => {
    const deep = '{"userId":"u","action":"login","metadata":' + '{"a":'.repeat(100) + "1" + "}".repeat(100) + "}";
    const { status, body } = await post("/api/v1/decide", deep);
    expect(status).toBe(400);
    expect(body.error.message).toMatch(/nested deeper/);
  });

  it("refuses a non-JSON content type with 415", async () => {
    const { status, body } = await post("/api/v1/decide", "userId=u&action=login", { "content-type": "application/x-www-form-urlencoded" });
    expect(status).toBe(415);
    expect(body.error.code).toBe("UNSUPPORTED_MEDIA_TYPE");
  });

  it("answers 404 for unknown paths and 405 with Allow for wrong methods", async () => {
    const missing = await fetch(`${server.url}/api/v1/nothing-here`, { headers: { "x-api-key": secret } });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as ErrorBody).error.code).toBe("NOT_FOUND");
    const wrong = await fetch(`${server.url}/api/v1/decide`, { method: "GET", headers: { "x-api-key": secret } });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("POST, OPTIONS");
    expect(((await wrong.json()) as ErrorBody).error.code).toBe("METHOD_NOT_ALLOWED");
    // Counted by route template: paths a client invents add no metric series.
    for (const id of ["case_invented_1", "case_invented_2"]) {
      expect((await fetch(`${server.url}/api/v1/cases/${id}`, { method: "PUT" })).status).toBe(405);
    }
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).toMatch(/fraud_requests_total\{route="PUT \/api\/v1\/cases\/\{id\}",protocol="rest",outcome="client_error",code="METHOD_NOT_ALLOWED"\} 2/);
    expect(metrics).not.toContain("case_invented");
  });

  it("answers HEAD as GET without the body, over HTTP/1.1 and h2c, and OPTIONS with the methods a path takes", async () => {
    const head = await fetch(`${server.url}/api/v1/cases`, { method: "HEAD", headers: { "x-api-key": secret } });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await head.text()).toBe("");
    expect((await fetch(`${server.url}/api/v1/cases`, { method: "HEAD" })).status).toBe(401);
    const session = http2.connect(server.url);
    try {
      const h2 = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({ ":method": "HEAD", ":path": "/api/v1/status?public=true" });
        let body = "";
        let status = 0;
        stream.on("response", (headers) => (status = Number(headers[":status"])));
        stream.on("data", (chunk: Buffer) => (body += chunk.toString()));
        stream.on("end", () => resolve({ status, body }));
        stream.on("error", reject);
        stream.end();
      });
      expect(h2).toEqual({ status: 200, body: "" });
    } finally {
      session.close();
    }
    const options = await fetch(`${server.url}/api/v1/cases`, { method: "OPTIONS" });
    expect(options.status).toBe(204);
    expect(options.headers.get("allow")).toBe("GET, HEAD, OPTIONS");
    expect(options.headers.get("access-control-allow-origin")).toBeNull();
    const rpcOptions = await fetch(`${server.url}/fraud.v1.CaseService/ListCases`, { method: "OPTIONS" });
    expect(rpcOptions.status).toBe(204);
    expect(rpcOptions.headers.get("allow")).toBe("POST, OPTIONS");
    expect((await fetch(`${server.url}/api/v1/nothing-here`, { method: "OPTIONS" })).status).toBe(404);
    // A wrong method names HEAD beside GET.
    const wrong = await fetch(`${server.url}/api/v1/cases`, { method: "DELETE", headers: { "x-api-key": secret } });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("GET, HEAD, OPTIONS");
  });

  it("answers CORS preflights for what a publishable key may call, and refuses the rest", async () => {
    const preflight = (path: string, method: string) =>
      fetch(`${server.url}${path}`, {
        method: "OPTIONS",
        headers: { origin: "https://shop.example", "access-control-request-method": method, "access-control-request-headers": "content-type, x-api-key" },
      });
    for (const [path, method] of [["/api/v1/decide", "POST"], ["/api/v1/analyze", "POST"], ["/api/v1/status", "GET"], ["/fraud.v1.DecisionService/Decide", "POST"]] as const) {
      const res = await preflight(path, method);
      expect(res.status, path).toBe(204);
      expect(res.headers.get("access-control-allow-origin"), path).toBe("*");
      expect(res.headers.get("access-control-allow-methods"), path).toBe(method);
      expect(res.headers.get("access-control-allow-headers"), path).toContain("x-api-key");
    }
    for (const [path, method, status, code] of [
      ["/api/v1/cases", "GET", 403, "FORBIDDEN"],
      ["/api/v1/feedback", "POST", 403, "FORBIDDEN"],
      ["/fraud.v1.CaseService/ListCases", "POST", 403, "FORBIDDEN"],
      ["/api/v1/decide", "DELETE", 405, "METHOD_NOT_ALLOWED"],
    ] as const) {
      const res = await preflight(path, method);
      expect(res.status, `${method} ${path}`).toBe(status);
      expect(res.headers.get("access-control-allow-origin"), path).toBeNull();
      expect(((await res.json()) as ErrorBody).error.code).toBe(code);
    }
    // The answer to a page's request carries the CORS headers only where the preflight would pass.
    const decided = await fetch(`${server.url}/api/v1/status?public=true`, { headers: { origin: "https://shop.example" } });
    expect(decided.headers.get("access-control-allow-origin")).toBe("*");
    // Whether the answer has them depends on Origin: caches are told so, on the answers without one too.
    expect(decided.headers.get("vary")).toBe("Origin");
    expect((await fetch(`${server.url}/api/v1/status?public=true`)).headers.get("vary")).toBe("Origin");
    expect(decided.headers.get("access-control-expose-headers")).toContain("x-request-id");
    // A secret key sent from a page is refused, and the page may not even read why.
    const cases = await fetch(`${server.url}/api/v1/cases`, { headers: { origin: "https://shop.example", "x-api-key": secret } });
    expect(cases.status).toBe(403);
    expect(cases.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("gives every HTTP answer its request id, health checks and metrics included", async () => {
    const ids = new Set<string>();
    for (const [path, status] of [["/api/health", 200], ["/api/health/live", 200], ["/api/health/ready", 200], ["/api/metrics", 200], ["/api/v1/status?public=true", 200], ["/api/v1/nothing-here", 404], ["/", 404]] as const) {
      const res = await fetch(`${server.url}${path}`);
      expect(res.status, path).toBe(status);
      const id = res.headers.get("x-request-id") ?? "";
      expect(id, path).toMatch(/^req_/);
      ids.add(id);
    }
    expect(ids.size).toBe(7);
  });

  it("validates query parameters by type and name", async () => {
    const badLimit = await fetch(`${server.url}/api/v1/cases?limit=500`, { headers: { "x-api-key": secret } });
    expect(badLimit.status).toBe(400);
    expect(((await badLimit.json()) as ErrorBody).error.details.fieldViolations).toEqual([{ field: "limit", description: "must be at most 100" }]);
    const notNumber = await fetch(`${server.url}/api/v1/cases?limit=ten`, { headers: { "x-api-key": secret } });
    expect(notNumber.status).toBe(400);
    const unknown = await fetch(`${server.url}/api/v1/cases?colour=red`, { headers: { "x-api-key": secret } });
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as ErrorBody).error.message).toMatch(/unknown query parameter colour/);
    const badStatus = await fetch(`${server.url}/api/v1/cases?status=closed`, { headers: { "x-api-key": secret } });
    expect(badStatus.status).toBe(400);
    // Numbers in decimal digits only, and a parameter given once.
    for (const query of ["limit=0x10", "limit=1e1", "limit=%205", "limit=5.0", "limit=+5"]) {
      const res = await fetch(`${server.url}/api/v1/cases?${query}`, { headers: { "x-api-key": secret } });
      expect(res.status, query).toBe(400);
      expect(((await res.json()) as ErrorBody).error.details.fieldViolations, query).toEqual([{ field: "limit", description: "must be a whole number in decimal digits" }]);
    }
    expect((await fetch(`${server.url}/api/v1/cases?limit=5`, { headers: { "x-api-key": secret } })).status).toBe(200);
    for (const query of ["limit=5&limit=500", "status=open&status=resolved"]) {
      const res = await fetch(`${server.url}/api/v1/cases?${query}`, { headers: { "x-api-key": secret } });
      expect(res.status, query).toBe(400);
      expect(((await res.json()) as ErrorBody).error.message, query).toMatch(/is given 2 times; give it once/);
    }
  });

  it("refuses query parameters whose percent-encoding is malformed or not UTF-8, naming them, as it refuses such a path segment", async () => {
    const refusal = async (path: string) => {
      const res = await fetch(`${server.url}${path}`, { headers: { "x-api-key": secret } });
      expect(res.status, path).toBe(400);
      return ((await res.json()) as ErrorBody).error;
    };
    for (const query of ["action=%ff", "action=%e2%82", "action=%zz", "action=100%", "action=ok&action=%ff"]) {
      expect(await refusal(`/api/v1/audit-logs?${query}`), query).toMatchObject({
        code: "VALIDATION_ERROR",
        message: "query parameter action is not valid percent-encoding",
        details: { fieldViolations: [{ field: "action", description: "is not valid percent-encoding" }] },
      });
    }
    expect((await refusal("/api/v1/cases?limit=%ff")).message).toBe("query parameter limit is not valid percent-encoding");
    expect((await refusal("/api/v1/cases?%ff=1")).message).toBe("query parameter %ff is not valid percent-encoding");
    expect((await refusal("/api/v1/cases/%ff")).message).toBe("path parameter id is not valid percent-encoding");
    // Well-formed encoding still decodes as URLSearchParams decodes it: '+' is a space, %2B a plus.
    expect((await fetch(`${server.url}/api/v1/cases?limit=%35&offset=0`, { headers: { "x-api-key": secret } })).status).toBe(200);
    expect((await fetch(`${server.url}/api/v1/audit-logs?action=case.updated+x%2By%C3%A9`, { headers: { "x-api-key": secret } })).status).toBe(200);
    expect((await refusal("/api/v1/cases?lim%69t=%2B5")).details.fieldViolations).toEqual([{ field: "limit", description: "must be a whole number in decimal digits" }]);
  });

  it("refuses a body in another charset or compressed with 415, naming what it got", async () => {
    const body = JSON.stringify({ userId: "u", action: "login" });
    const latin1 = await post("/api/v1/decide", body, { "content-type": "application/json; charset=latin1" });
    expect(latin1.status).toBe(415);
    expect(latin1.body.error.message).toBe("request bodies must be UTF-8 JSON, got charset=latin1");
    const gzipped = await post("/api/v1/decide", gzipSync(body), { "content-type": "application/json", "content-encoding": "gzip" });
    expect(gzipped.status).toBe(415);
    expect(gzipped.body.error.message).toBe("request bodies are read uncompressed: Content-Encoding gzip is not supported");
    expect((await post("/api/v1/decide", body, { "content-type": "application/json; charset=UTF-8" })).status).toBe(200);
  });

  it("reads a path that starts with // as a path, not as a host", async () => {
    const answer = await new Promise<string>((resolve) => {
      const socket = net.connect(server.port, "127.0.0.1", () =>
        socket.write(`GET //evil/api/v1/cases HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nConnection: close\r\n\r\n`),
      );
      let text = "";
      socket.on("data", (chunk) => (text += chunk));
      socket.on("close", () => resolve(text));
    });
    expect(answer).toMatch(/^HTTP\/1.1 404/);
    expect(answer).toContain("no endpoint GET //evil/api/v1/cases");
  });

  it("checks the key before it reads the body: 401 without a valid key whatever the body holds, or however large it says it is", async () => {
    const post = (body: string, headers: Record<string, string> = {}) =>
      fetch(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
    // Rules (allowed values, required fields), and bodies that are no request message at all: the caller
    // learns nothing before it is authenticated, and costs the server no parse.
    for (const headers of [{}, { "x-api-key": "sk_test_nope" }] as Array<Record<string, string>>) {
      for (const body of ['{"userId":"u","action":"bogus"}', "{}", '{"userId":1}', "not json", '{"nope":true}']) {
        expect((await post(body, headers)).status, `${body} ${JSON.stringify(headers)}`).toBe(401);
      }
      expect((await post("{}", { ...headers, "content-type": "text/plain" })).status).toBe(401);
    }
    // A publishable key where a secret one is needed: 403, its body unread too.
    expect((await fetch(`${server.url}/api/v1/feedback`, { method: "POST", headers: { "x-api-key": publishable, "content-type": "application/json" }, body: "not json" })).status).toBe(403);
    // A body declared over the limit, without a key: 401 at once, the body never read.
    const oversized = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "content-length": String(50 * 4096) } });
      req.on("response", (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body: text });
        });
      });
      req.on("error", reject);
      req.write("{");
    });
    expect(oversized.status).toBe(401);
    expect((JSON.parse(oversized.body) as ErrorBody).error.code).toBe("UNAUTHORIZED");
    // With a valid key, the body is read: one that is not the request message is 400 naming the field.
    const wrongType = await post('{"userId":1}', { "x-api-key": secret });
    expect(wrongType.status).toBe(400);
    expect(((await wrongType.json()) as ErrorBody).error.details.fieldViolations).toEqual([{ field: "userId", description: "must be a string" }]);
  });

  it("reads no more of a refused HTTP/1.1 body than the size limit, and keeps a connection whose refused body was small", async () => {
    /** Uploads `declared` bytes without a key (chunked when `chunked`); resolves once the server closes the connection. */
    const upload = (declared: number, chunked: boolean) =>
      new Promise<{ status: number; connection: string | undefined; written: number }>((resolve, reject) => {
        const req = http.request(`${server.url}/api/v1/decide`, {
          method: "POST",
          headers: { "content-type": "application/json", ...(chunked ? { "transfer-encoding": "chunked" } : { "content-length": String(declared) }) },
        });
        let status = 0;
        let connection: string | undefined;
        let uploaded = { written: () => 0 };
        req.on("response", (res) => {
          status = res.statusCode ?? 0;
          connection = res.headers.connection;
          res.resume();
        });
        req.on("socket", (socket) => socket.once("close", () => resolve({ status, connection, written: uploaded.written() })));
        req.on("error", (error: NodeJS.ErrnoException) => {
          if (error.code !== "EPIPE" && error.code !== "ECONNRESET") reject(error);
        });
        uploaded = pumpUpload(req, declared, Buffer.alloc(16 * 1024, 0x20));
      });
    const declared = 64 * 1024 * 1024;
    // Declared over the limit: the 401 says the connection closes, and it does (it stayed open, the body read
    // to the request timeout).
    const declaredOver = await upload(declared, false);
    expect(declaredOver).toMatchObject({ status: 401, connection: "close" });
    expect(declaredOver.written).toBeLessThan(declared / 2);
    // Chunked: the 401 goes at once (keep-alive); the connection closes once the dropped body passes the limit.
    const chunkedOver = await upload(declared, true);
    expect(chunkedOver.status).toBe(401);
    expect(chunkedOver.written).toBeLessThan(declared / 2);
    // A small refused body is dropped, and the request pipelined behind it answered on the same connection.
    const answers = await new Promise<string>((resolve) => {
      const socket = net.connect(server.port, "127.0.0.1", () =>
        socket.write("POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\nnot json!GET /api/health/live HTTP/1.1\r\nHost: x\r\n\r\n"),
      );
      let text = "";
      socket.on("data", (chunk: Buffer) => {
        text += chunk.toString("latin1");
        if (text.includes('"live":true')) {
          socket.destroy();
          resolve(text);
        }
      });
    });
    expect(answers.match(/HTTP\/1\.1 \d{3}/g)).toEqual(["HTTP/1.1 401", "HTTP/1.1 200"]);
  }, 15_000);

  it("tells a malformed Authorization header from a missing key", async () => {
    for (const authorization of [`Bearer ${secret} extra`, "Bearer ", `Basic ${secret}`]) {
      const res = await fetch(`${server.url}/api/v1/cases`, { headers: { authorization } });
      expect(res.status, authorization).toBe(401);
      expect(((await res.json()) as ErrorBody).error.message, authorization).toMatch(/Authorization header must be "Bearer " followed by the API key/);
    }
    const missing = await fetch(`${server.url}/api/v1/cases`);
    expect(((await missing.json()) as ErrorBody).error.message).toMatch(/an API key is required/);
  });

  it("refuses two different API keys in X-API-Key and Authorization, and lets a proxy's own Authorization be", async () => {
    const other = server.createAccount("Second key").keys.test.secret;
    const cases = (headers: Record<string, string>) => fetch(`${server.url}/api/v1/cases`, { headers });
    const conflicting = await cases({ "x-api-key": secret, authorization: `Bearer ${other}` });
    expect(conflicting.status).toBe(401);
    expect(((await conflicting.json()) as ErrorBody).error.message).toBe("X-API-Key and Authorization: Bearer carry two different API keys; send one");
    // Even when one of them is not a key of this service's any more: which was meant cannot be told.
    expect((await cases({ "x-api-key": "sk_test_zzz", authorization: `Bearer ${secret}` })).status).toBe(401);
    for (const authorization of [`Bearer ${secret}`, "Bearer a-proxy-token", "Basic dXNlcjpwYXNz"]) {
      expect((await cases({ "x-api-key": secret, authorization })).status, authorization).toBe(200);
    }
    // X-API-Key sent twice (a proxy adding its own, a header set in two places): said so, even with the same key twice.
    for (const second of [secret, other]) {
      const twice = await fetch(`${server.url}/api/v1/cases`, { headers: [["x-api-key", secret], ["x-api-key", second]] });
      expect(twice.status).toBe(401);
      expect(((await twice.json()) as ErrorBody).error.message).toBe("X-API-Key carries more than one value (was the header sent twice?); send one key");
    }
  });

  it("validates id prefixes in paths", async () => {
    const res = await fetch(`${server.url}/api/v1/decisions/req_123`, { headers: { "x-api-key": secret } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as ErrorBody).error.details.fieldViolations).toEqual([{ field: "id", description: "must start with dec_ or evi_" }]);
    const cases = await fetch(`${server.url}/api/v1/cases/dec_123`, { headers: { "x-api-key": secret } });
    expect(cases.status).toBe(400);
    expect(((await cases.json()) as ErrorBody).error.details.fieldViolations).toEqual([{ field: "id", description: "must start with case_" }]);
  });

  it("carries the same failure over Connect with the code string", async () => {
    const client = createClient(DecisionService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    const error = await client.decide({ userId: "", action: "login" }, { headers: { "x-api-key": secret } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    const connectError = error as ConnectError;
    expect(connectError.code).toBe(Code.InvalidArgument);
    expect(connectError.metadata.get("fraud-error-code")).toBe("VALIDATION_ERROR");
    const detail = connectError.findDetails(ErrorDetailSchema)[0];
    expect(detail?.code).toBe("VALIDATION_ERROR");
    expect(detail?.fieldViolations.map((v) => v.field)).toEqual(["userId"]);
  });

  it("carries the error detail over Connect when the caller is refused before its message is read", async () => {
    const transport = createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" });
    const decide = createClient(DecisionService, transport);
    const lists = createClient(ListService, transport);
    const refusals = [
      { call: () => decide.decide({ userId: "u", action: "login" }, { headers: { "x-api-key": "sk_test_not-a-key" } }), code: Code.Unauthenticated, fraudCode: "UNAUTHORIZED" },
      { call: () => lists.listLists({}, { headers: { "x-api-key": publishable } }), code: Code.PermissionDenied, fraudCode: "FORBIDDEN" },
    ];
    for (const { call, code, fraudCode } of refusals) {
      const error = await call().then(() => undefined, (e: unknown) => e);
      expect(error, fraudCode).toBeInstanceOf(ConnectError);
      const connectError = error as ConnectError;
      expect(connectError.code).toBe(code);
      expect(connectError.metadata.get("fraud-error-code")).toBe(fraudCode);
      expect(connectError.findDetails(ErrorDetailSchema)[0]?.code).toBe(fraudCode);
    }
    // The raw body is Connect's error JSON, as the router writes it for an error raised in a handler.
    const res = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "sk_test_not-a-key" },
      body: JSON.stringify({ userId: "u", action: "login" }),
    });
    expect(res.status).toBe(401);
    const body = (await res.json()) as { code: string; details: Array<{ type: string; value: string; debug: { code: string } }> };
    expect(body.code).toBe("unauthenticated");
    expect(body.details.map((d) => [d.type, d.debug.code])).toEqual([["fraud.v1.ErrorDetail", "UNAUTHORIZED"]]);
  });

  it("carries the same failure over gRPC with the code string in the trailers", async () => {
    const client = grpcClient(server.port);
    try {
      const result = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "u", action: "nope" }, { "x-api-key": secret });
      expect(result.error?.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(result.error?.details).toMatch(/action must be one of/);
      expect(result.trailers?.get("fraud-error-code")).toEqual(["VALIDATION_ERROR"]);
    } finally {
      client.close();
    }
  });

  it("refuses numbers no double can hold, wherever they are, by their JSON path", async () => {
    const inMetadata = await post("/api/v1/decide", '{"userId":"u1","action":"login","metadata":{"x":1e400,"y":{"z":[-1e400]}}}');
    expect(inMetadata.status).toBe(400);
    expect(inMetadata.body.error.details.fieldViolations).toEqual([
      { field: "metadata.x", description: "must be a finite number" },
      { field: "metadata.y.z[0]", description: "must be a finite number" },
    ]);
    // With an Idempotency-Key the request is hashed before anything else: still a 400.
    expect((await post("/api/v1/decide", '{"userId":"u1","action":"login","metadata":{"x":-1e400}}', { "idempotency-key": "k-inf" })).status).toBe(400);
    const amount = await post("/api/v1/decide", '{"userId":"u1","action":"checkout","amount":1e400,"currency":"USD"}');
    expect(amount.body.error.details.fieldViolations).toEqual([{ field: "amount", description: "must be a finite number" }]);
  });

  it("bounds what metadata holds, by JSON path: what policy rules read on every decision", async () => {
    const metadata = { note: "x".repeat(1025), cart: { items: Array.from({ length: 101 }, (_, i) => i) }, ok: "y".repeat(1024), few: [1, 2, 3] };
    const { status, body } = await post("/api/v1/decide", JSON.stringify({ userId: "u", action: "login", metadata }));
    expect(status).toBe(400);
    expect(body.error.details.fieldViolations).toEqual([
      { field: "metadata.note", description: "must be at most 1024 characters" },
      { field: "metadata.cart.items", description: "must have at most 100 items" },
    ]);
  });

  it("refuses integers out of their type's range and malformed timestamps, by their JSON path", async () => {
    const width = await post("/api/v1/decide", JSON.stringify({ userId: "u", action: "login", device: { screen: { width: -1, height: 4294967296 } } }));
    expect(width.status).toBe(400);
    expect(width.body.error.details.fieldViolations).toEqual([
      { field: "device.screen.width", description: "must be between 0 and 4294967295" },
      { field: "device.screen.height", description: "must be between 0 and 4294967295" },
    ]);
    await post("/api/v1/lists", JSON.stringify({ name: "blocked", kind: "user", type: "deny" }));
    for (const expiresAt of ["not a date", "10000-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "2030-01-02t03:04:05z", "0001-01-01T00:00:00+01:00"]) {
      const entry = await post("/api/v1/lists/blocked/entries", JSON.stringify({ entries: [{ value: "u1", expiresAt }] }));
      expect(entry.status, expiresAt).toBe(400);
      expect(entry.body.error.details.fieldViolations?.[0]?.field).toBe("entries[0].expiresAt");
    }
  });

  it("refuses a timestamp on a day or at a time the calendar does not have, which Date.parse would roll over", async () => {
    const put = await fetch(`${server.url}/api/v1/lists/calendar_checked`, {
      method: "PUT",
      headers: { "content-type": "application/json", "x-api-key": secret },
      body: JSON.stringify({ kind: "user", type: "deny" }),
    });
    expect(put.status).toBe(201);
    const add = (expiresAt: string) => post("/api/v1/lists/calendar_checked/entries", JSON.stringify({ entries: [{ value: "u1", expiresAt }] }));
    const impossible = [
      "2030-02-30T00:00:00Z", "2030-02-31T00:00:00+01:00", "2030-04-31T00:00:00Z", "2100-02-29T00:00:00Z", "2030-00-10T00:00:00Z", "2030-01-00T00:00:00Z",
      "2030-01-01T24:00:00Z", "2030-01-01T00:60:00Z", "2030-01-01T00:00:60Z", "2030-01-01T00:00:00+24:00", "2030-01-01T00:00:00-05:60",
    ];
    for (const expiresAt of impossible) {
      const entry = await add(expiresAt);
      expect(entry.status, expiresAt).toBe(400);
      expect(entry.body.error.details.fieldViolations, expiresAt).toEqual([{ field: "entries[0].expiresAt", description: "must be an RFC 3339 timestamp such as 2026-01-02T03:04:05Z" }]);
    }
    // Leap days (a year divisible by 400 among them) and the last instant of a month.
    for (const expiresAt of ["2028-02-29T23:59:59Z", "2400-02-29T12:00:00Z", "2030-12-31T23:59:59.999999999-23:59"]) {
      expect((await add(expiresAt)).status, expiresAt).toBe(200);
    }
  });

  it("names a field's own bounds for a number past its type's range, in the query and the path too", async () => {
    const get = async (path: string) => {
      const res = await fetch(`${server.url}${path}`, { headers: { "x-api-key": secret } });
      return { status: res.status, body: (await res.json()) as ErrorBody };
    };
    const cases: Array<[string, string, string]> = [
      ["/api/v1/cases?limit=99999999999", "limit", "must be at most 100"],
      ["/api/v1/audit-logs?limit=2147483648", "limit", "must be at most 100"],
      ["/api/v1/cases?offset=-99999999999", "offset", "must be at least 0"],
      ["/api/v1/policies/pol_x/versions/-99999999999", "version", "must be at least 1"],
      // No bound of its own above: the type's, from the field's own lower bound.
      ["/api/v1/policies/pol_x/versions/99999999999", "version", "must be between 1 and 2147483647"],
      ["/api/v1/cases?offset=99999999999", "offset", "must be between 0 and 2147483647"],
    ];
    for (const [path, field, description] of cases) {
      const { status, body } = await get(path);
      expect(status, path).toBe(400);
      expect(body.error.details.fieldViolations, path).toEqual([{ field, description }]);
    }
  });

  it("refuses NaN and Infinity sent in binary protobuf, naming the field", async () => {
    const client = createClient(DecisionService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", useBinaryFormat: true }));
    const cases: Array<[Parameters<typeof client.decide>[0], string]> = [
      [{ userId: "u", action: "checkout", amount: Number.POSITIVE_INFINITY, currency: "USD" }, "amount"],
      [{ userId: "u", action: "login", behavior: { timeOnPageMs: Number.NEGATIVE_INFINITY } }, "behavior.timeOnPageMs"],
      [{ userId: "u", action: "login", device: { screen: { pixelRatio: Number.NaN } } }, "device.screen.pixelRatio"],
      [{ userId: "u", action: "login", metadata: { x: Number.NaN } }, "metadata.x"],
    ];
    for (const [request, field] of cases) {
      const error = await client.decide(request, { headers: { "x-api-key": secret } }).then(() => undefined, (e: unknown) => e);
      expect(error, field).toBeInstanceOf(ConnectError);
      expect((error as ConnectError).code, field).toBe(Code.InvalidArgument);
      expect((error as ConnectError).findDetails(ErrorDetailSchema)[0]?.fieldViolations, field).toEqual([{ $typeName: "fraud.v1.FieldViolation", field, description: "must be a finite number" }]);
    }
  });

  it("refuses a timestamp past what RFC 3339 writes, sent in binary protobuf, storing nothing", async () => {
    const lists = createClient(ListService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", useBinaryFormat: true }));
    const created = await fetch(`${server.url}/api/v1/lists/far_future`, {
      method: "PUT",
      headers: { "content-type": "application/json", "x-api-key": secret },
      body: JSON.stringify({ kind: "user", type: "deny" }),
    });
    expect(created.status).toBeLessThan(300);
    const entries = [{ value: "fine" }, { value: "far", expiresAt: { seconds: 300_000_000_000n } }];
    const error = await lists.addListEntries({ name: "far_future", entries }, { headers: { "x-api-key": secret } }).then(() => undefined, (e: unknown) => e);
    expect((error as ConnectError).code).toBe(Code.InvalidArgument);
    expect((error as ConnectError).findDetails(ErrorDetailSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual(["entries[1].expiresAt"]);
    const list = await fetch(`${server.url}/api/v1/lists/far_future`, { headers: { "x-api-key": secret } });
    expect(list.status).toBe(200);
    expect(((await list.json()) as { data: { entries?: unknown[] } }).data.entries ?? []).toEqual([]);
  });

  it("never answered with a server error during these tests", async () => {
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).not.toMatch(/outcome="server_error"/);
    expect(metrics).toMatch(/fraud_requests_total\{route="POST \/api\/v1\/decide",protocol="rest",outcome="client_error",code="VALIDATION_ERROR"\}/);
  });

  it("answers 500 with the error envelope and logs the cause when an answer cannot be encoded", async () => {
    const headers = { "content-type": "application/json", "x-api-key": secret };
    await fetch(`${server.url}/api/v1/lists/unreadable`, { method: "PUT", headers, body: JSON.stringify({ kind: "user", type: "deny" }) });
    const added = await post("/api/v1/lists/unreadable/entries", JSON.stringify({ entries: [{ value: "far", expiresAt: "2030-01-01T00:00:00Z" }] }));
    expect(added.status).toBe(200);
    // Stored before timestamps were checked (or written behind the service's back): a year past 9999.
    server.app.db.prepare("UPDATE list_entries SET expires_at = ? WHERE list_name = ?").run(300_000_000_000_000, "unreadable");
    const logged = server.logs.length;
    const res = await fetch(`${server.url}/api/v1/lists/unreadable`, { headers: { "x-api-key": secret } });
    expect(res.status).toBe(500);
    const body = (await res.json()) as ErrorBody;
    expect(body).toMatchObject({ success: false, error: { code: "INTERNAL_ERROR", message: expect.stringMatching(/^internal error; quote request id req_/) } });
    expect(server.logs.slice(logged).some((line) => line.includes('"unhandled error"') && line.includes("Timestamp"))).toBe(true);
  });
});
