import fs from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import path from "node:path";
import Database from "../src/store/sqlite-driver.cjs";
import { brotliCompressSync, gzipSync } from "node:zlib";
import * as grpc from "@grpc/grpc-js";
import { Code, createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DecideRequestSchema, DecideResponseSchema, DecisionService } from "../gen/fraud/v1/decision_pb.js";
import { ErrorDetailSchema } from "../gen/fraud/v1/errors_pb.js";
import type { AccountKeys } from "../src/auth/key-service.js";
import { encodeGrpcMessage } from "../src/server/grpc-unary.js";
import { grpcClient, grpcUnary } from "./helpers/grpc.js";
import { USER_AGENTS } from "./helpers/inputs.js";
import { startTestServer, tempDir, type TestServer } from "./helpers/server.js";

const MAX_BODY_BYTES = 4096;
const DECIDE_PATH = "/fraud.v1.DecisionService/Decide";

let server: TestServer;
let keys: AccountKeys;

beforeAll(async () => {
  server = await startTestServer({ config: { maxBodyBytes: MAX_BODY_BYTES, engineThreads: 1 } });
  keys = server.createAccount("gRPC");
});
afterAll(() => server.close());

interface RawAnswer {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  data: Buffer;
}

/** One gRPC request written by hand over h2c, to send what a well-behaved client never would. */
function rawCall(port: number, path: string, body: Buffer, headers: Record<string, string> = {}, options: { leaveOpen?: boolean } = {}): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.once("error", reject);
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    let answered: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => (answered = h));
    stream.on("trailers", (t) => (trailers = t));
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.once("end", () => {
      session.close();
      resolve({ headers: answered, trailers, data: Buffer.concat(chunks) });
    });
    stream.once("error", reject);
    if (options.leaveOpen) stream.write(body);
    else stream.end(body);
  });
}

function envelope(message: Uint8Array, flags = 0): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

const decideInput = () => toBinary(DecideRequestSchema, create(DecideRequestSchema, { userId: "raw_user", action: "login", ip: "81.2.69.160", userAgent: USER_AGENTS.windowsChrome }));

describe("unary gRPC", () => {
  it("answers with the message, the request id in the headers and status 0 in the trailers", async () => {
    const answer = await rawCall(server.port, DECIDE_PATH, envelope(decideInput()), { "x-api-key": keys.keys.test.secret });
    expect(answer.headers[":status"]).toBe(200);
    expect(answer.headers["content-type"]).toBe("application/grpc+proto");
    expect(answer.headers["x-request-id"]).toMatch(/^req_/);
    expect(answer.headers["ratelimit"]).toBeDefined();
    expect(answer.trailers["grpc-status"]).toBe("0");
    expect(answer.data.readUInt32BE(1)).toBe(answer.data.length - 5);
    const decided = fromBinary(DecideResponseSchema, answer.data.subarray(5));
    expect(decided.evidenceId).toMatch(/^evi_/);
    expect(["allow", "challenge", "deny"]).toContain(decided.decision);
  });

  it("reports a refused call in the trailers: status, message, error code, request id and details", async () => {
    const answer = await rawCall(server.port, DECIDE_PATH, envelope(decideInput()));
    expect(answer.data.length).toBe(0);
    expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.UNAUTHENTICATED));
    expect(decodeURIComponent(answer.trailers["grpc-message"] as string)).toMatch(/API key is required/);
    expect(answer.trailers["fraud-error-code"]).toBe("UNAUTHORIZED");
    expect(answer.trailers["x-request-id"]).toMatch(/^req_/);
    expect(answer.trailers["grpc-status-details-bin"]).toBeDefined();

    const client = grpcClient(server.port);
    try {
      const result = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "u", action: "login" }, { "x-api-key": "fk_test_wrong" });
      expect(result.error?.code).toBe(grpc.status.UNAUTHENTICATED);
      // The message reads as written, punctuation included (grpc-js decodes it with decodeURI).
      expect(result.error?.details).toBe("the API key is invalid, expired or revoked");
      expect(result.trailers?.get("fraud-error-code")).toEqual(["UNAUTHORIZED"]);
    } finally {
      client.close();
    }
  });

  it("percent-encodes grpc-message as the gRPC protocol does, so both decodeURI and decodeURIComponent read it back", () => {
    for (const message of ["the API key is invalid, expired or revoked", "no RPC method a.b/C: see https://x.example/?q=1#f", "100% sure", "déjà vu ✓", "line\nbreak"]) {
      const encoded = encodeGrpcMessage(message);
      expect(encoded).toMatch(/^[\x20-\x7e]*$/);
      expect(decodeURI(encoded), message).toBe(message);
      expect(decodeURIComponent(encoded), message).toBe(message);
    }
    expect(encodeGrpcMessage("a, b/c: 5%")).toBe("a, b/c: 5%25");
  });

  it("gives what the protocol layer refuses the service's ErrorDetail too, on gRPC, gRPC-Web and Connect", async () => {
    const key = { "x-api-key": keys.keys.test.secret };
    /** The service code a google.rpc.Status holds in its fraud.v1.ErrorDetail (a string field: its bytes are there as written). */
    const detailOf = (statusBin: unknown, code: string) => {
      const bytes = Buffer.from(String(statusBin), "base64").toString("latin1");
      return bytes.includes(`type.googleapis.com/${ErrorDetailSchema.typeName}`) && bytes.includes(code);
    };
    const grpcCases: Array<[string, Buffer, Record<string, string>, number, string]> = [
      ["bytes that do not decode", envelope(Buffer.from([0x0a, 0xff, 0xff])), key, grpc.status.INVALID_ARGUMENT, "VALIDATION_ERROR"],
      ["two messages in a unary call", Buffer.concat([envelope(decideInput()), envelope(decideInput())]), key, grpc.status.INVALID_ARGUMENT, "VALIDATION_ERROR"],
      ["a message over the size limit", envelope(Buffer.alloc(MAX_BODY_BYTES + 1)), key, grpc.status.RESOURCE_EXHAUSTED, "PAYLOAD_TOO_LARGE"],
      ["a deadline that cannot be read", envelope(decideInput()), { ...key, "grpc-timeout": "abc" }, grpc.status.INVALID_ARGUMENT, "VALIDATION_ERROR"],
      ["a deadline already passed", envelope(decideInput()), { ...key, "grpc-timeout": "1n" }, grpc.status.DEADLINE_EXCEEDED, "TIMEOUT"],
      ["a compression the service does not take", envelope(decideInput(), 1), { ...key, "grpc-encoding": "deflate" }, grpc.status.UNIMPLEMENTED, "NOT_IMPLEMENTED"],
      ["a JSON message with an unknown field", envelope(Buffer.from('{"userID":"u","action":"login"}')), { ...key, "content-type": "application/grpc+json" }, grpc.status.INVALID_ARGUMENT, "VALIDATION_ERROR"],
    ];
    for (const [what, body, headers, status, code] of grpcCases) {
      const answer = await rawCall(server.port, DECIDE_PATH, body, headers);
      const fields = answer.trailers["grpc-status"] === undefined ? answer.headers : answer.trailers;
      expect(fields["grpc-status"], what).toBe(String(status));
      expect(fields["fraud-error-code"], what).toBe(code);
      expect(detailOf(fields["grpc-status-details-bin"], code), what).toBe(true);
    }

    // gRPC-Web: the status is in the body's trailer frame.
    const web = await fetch(`${server.url}${DECIDE_PATH}`, {
      method: "POST",
      headers: { ...key, "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      body: envelope(Buffer.from([0x0a, 0xff, 0xff])),
    });
    const frame = Buffer.from(await web.arrayBuffer());
    const trailer = frame.subarray(5).toString("latin1");
    expect(frame[0]).toBe(0x80);
    expect(trailer).toMatch(/^grpc-status: 3\r$/m);
    expect(trailer).toMatch(/^fraud-error-code: VALIDATION_ERROR\r$/m);
    expect(detailOf(/^grpc-status-details-bin: (\S+)\r$/m.exec(trailer)?.[1], "VALIDATION_ERROR")).toBe(true);

    // Connect: its JSON error, with the detail as the router writes its own errors' details.
    const connect = await fetch(`${server.url}${DECIDE_PATH}`, {
      method: "POST",
      headers: { ...key, "content-type": "application/json" },
      body: '{"userID":"u","action":"login"}',
    });
    expect(connect.status).toBe(400);
    expect(connect.headers.get("fraud-error-code")).toBe("VALIDATION_ERROR");
    expect(await connect.json()).toMatchObject({ code: "invalid_argument", details: [{ type: "fraud.v1.ErrorDetail", debug: { code: "VALIDATION_ERROR" } }] });
  });

  it("refuses bytes that are not the request message", async () => {
    const answer = await rawCall(server.port, DECIDE_PATH, envelope(Buffer.from([0x0a, 0xff, 0xff])), { "x-api-key": keys.keys.test.secret });
    expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.INVALID_ARGUMENT));
    expect(decodeURIComponent(answer.trailers["grpc-message"] as string)).toMatch(/^parse binary: /);
    // Without a key the message is never read: UNAUTHENTICATED, whatever it holds.
    const keyless = await rawCall(server.port, DECIDE_PATH, envelope(Buffer.from([0x0a, 0xff, 0xff])), {});
    expect(keyless.trailers["grpc-status"]).toBe(String(grpc.status.UNAUTHENTICATED));
    // A message flagged compressed on a call that names no grpc-encoding: the client's fault, counted as its.
    const before = await (await fetch(`${server.url}/api/v1/status?public=true`)).json();
    for (let i = 0; i < 5; i++) {
      const flagged = await rawCall(server.port, DECIDE_PATH, Buffer.from([1, 0, 0, 0, 2, 1, 2]), { "x-api-key": keys.keys.test.secret });
      expect(flagged.trailers["grpc-status"]).toBe(String(grpc.status.INVALID_ARGUMENT));
      expect(flagged.trailers["fraud-error-code"]).toBe("VALIDATION_ERROR");
    }
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).not.toMatch(/route="\/fraud\.v1\.DecisionService\/Decide",protocol="grpc",outcome="server_error"/);
    expect(await (await fetch(`${server.url}/api/v1/status?public=true`)).json()).toMatchObject({ data: { status: (before as { data: { status: string } }).data.status } });
  });

  it("refuses a request's framing faults as the client's, INVALID_ARGUMENT stating the mismatch, never UNIMPLEMENTED", async () => {
    const message = decideInput();
    const key = { "x-api-key": keys.keys.test.secret };
    const refusal = async (body: Buffer) => {
      const answer = await rawCall(server.port, DECIDE_PATH, body, key);
      expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.INVALID_ARGUMENT));
      expect(answer.trailers["fraud-error-code"]).toBe("VALIDATION_ERROR");
      return decodeURIComponent(answer.trailers["grpc-message"] as string);
    };
    expect(await refusal(envelope(message).subarray(0, 20))).toBe(`protocol error: the request's envelope declares ${message.length} bytes but 15 followed`);
    expect(await refusal(Buffer.from([0, 0]))).toBe("protocol error: incomplete envelope: a message's envelope takes 5 bytes, the request has 2");
    expect(await refusal(Buffer.alloc(0))).toBe("protocol error: a unary call takes one request message; this one carried none");
    expect(await refusal(Buffer.concat([envelope(message), envelope(message)]))).toBe("protocol error: a unary call takes one request message; this one carried 2");
    // A length 3 bytes short of its message: no second message, a length that does not fit.
    const short = envelope(message);
    short.writeUInt32BE(message.length - 3, 1);
    expect(await refusal(short)).toBe(`protocol error: the request's envelope declares ${message.length - 3} bytes but ${message.length} followed`);
  });

  it("refuses a request message whose envelope sets a flag gRPC does not define", async () => {
    const answer = await rawCall(server.port, DECIDE_PATH, envelope(decideInput(), 0x80), { "x-api-key": keys.keys.test.secret });
    expect(answer.data.length).toBe(0);
    expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.INVALID_ARGUMENT));
    expect(answer.trailers["fraud-error-code"]).toBe("VALIDATION_ERROR");
    expect(decodeURIComponent(answer.trailers["grpc-message"] as string)).toBe("protocol error: envelope flags 0x80 are not defined for a request message");
  });

  it("stops a client that keeps sending past the size limit once it has its answer", async () => {
    const session = http2.connect(`http://127.0.0.1:${server.port}`);
    const stream = session.request({ ":method": "POST", ":path": DECIDE_PATH, "content-type": "application/grpc", te: "trailers", "x-api-key": keys.keys.test.secret });
    let status: unknown;
    stream.on("trailers", (t) => (status = t["grpc-status"]));
    stream.on("data", () => undefined);
    stream.on("error", () => undefined);
    const declared = 20 * 1024 * 1024;
    const head = Buffer.alloc(5);
    head.writeUInt32BE(declared, 1);
    const chunk = Buffer.alloc(64 * 1024, 1);
    let written = 0;
    await new Promise<void>((resolve) => {
      stream.once("close", () => resolve());
      stream.write(head);
      const pump = () => {
        while (written < declared) {
          written += chunk.length;
          if (!stream.write(chunk)) {
            stream.once("drain", pump);
            return;
          }
        }
        stream.end();
      };
      pump();
    });
    session.destroy();
    expect(status).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
    // Told to stop (RST_STREAM NO_ERROR), the client sent a fraction of its 20 MiB.
    expect(written).toBeLessThan(2 * 1024 * 1024);
  });

  it("serves a call whose deadline is further away than a timer can wait", async () => {
    const client = grpcClient(server.port);
    try {
      const meta = new grpc.Metadata();
      meta.set("x-api-key", keys.keys.test.secret);
      const error = await new Promise<grpc.ServiceError | null>((resolve) => {
        client.makeUnaryRequest(DECIDE_PATH, (m: Buffer) => m, (b: Buffer) => b, Buffer.from(decideInput()), meta, { deadline: Date.now() + 30 * 24 * 3600 * 1000 }, (e) => resolve(e));
      });
      expect(error).toBeNull();
    } finally {
      client.close();
    }
  });

  it("refuses a message over the size limit and a malformed deadline", async () => {
    const big = create(DecideRequestSchema, { userId: "x".repeat(MAX_BODY_BYTES), action: "login" });
    const oversized = await rawCall(server.port, DECIDE_PATH, envelope(toBinary(DecideRequestSchema, big)), { "x-api-key": keys.keys.test.secret });
    expect(oversized.trailers["grpc-status"]).toBe(String(grpc.status.RESOURCE_EXHAUSTED));

    const badDeadline = await rawCall(server.port, DECIDE_PATH, envelope(decideInput()), { "x-api-key": keys.keys.test.secret, "grpc-timeout": "soon" });
    expect(badDeadline.trailers["grpc-status"]).toBe(String(grpc.status.INVALID_ARGUMENT));
    expect(decodeURIComponent(badDeadline.trailers["grpc-message"] as string)).toMatch(/invalid grpc timeout value: soon/);
    // Without a key, the caller is refused first, as Connect's handler (a compressed call) refuses it.
    for (const encoding of [{}, { "grpc-encoding": "gzip" }] as Array<Record<string, string>>) {
      const keyless = await rawCall(server.port, DECIDE_PATH, envelope(decideInput()), { "grpc-timeout": "soon", ...encoding });
      expect(keyless.trailers["grpc-status"], JSON.stringify(encoding)).toBe(String(grpc.status.UNAUTHENTICATED));
      expect(keyless.trailers["fraud-error-code"]).toBe("UNAUTHORIZED");
    }
  });

  it("carries validation details as google.rpc.Status with the service's ErrorDetail", async () => {
    const input = toBinary(DecideRequestSchema, create(DecideRequestSchema, { userId: "u", action: "nope" }));
    const answer = await rawCall(server.port, DECIDE_PATH, envelope(input), { "x-api-key": keys.keys.test.secret });
    expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.INVALID_ARGUMENT));
    const client = grpcClient(server.port);
    try {
      const result = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "u", action: "nope" }, { "x-api-key": keys.keys.test.secret });
      expect(result.error?.code).toBe(grpc.status.INVALID_ARGUMENT);
      const details = result.trailers?.get("grpc-status-details-bin")[0];
      expect(details).toBeInstanceOf(Buffer);
      // google.rpc.Status: field 3 holds Any messages; the ErrorDetail's type URL is inside.
      expect((details as Buffer).toString("latin1")).toContain(`type.googleapis.com/${ErrorDetailSchema.typeName}`);
    } finally {
      client.close();
    }
  });

  it("takes gzip and brotli requests (through Connect's handler), bounds what they expand to, and names an encoding it does not take", async () => {
    // A client configured to compress, as grpc-go's UseCompressor and grpc-js's option do.
    const client = grpcClient(server.port, { "grpc.default_compression_algorithm": 2 });
    try {
      const result = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "gzip_user", action: "login" }, { "x-api-key": keys.keys.test.secret });
      expect(result.error).toBeNull();
      expect(result.response?.evidenceId).toMatch(/^evi_/);
      // Its refusals read as written: grpc-message percent-encoded as gRPC says, which grpc-js decodes.
      const refused = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "", action: "login" }, { "x-api-key": keys.keys.test.secret });
      expect(refused.error?.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(refused.error?.details).toBe("invalid request: userId is required");
    } finally {
      client.close();
    }
    for (const [encoding, compress] of [["gzip", gzipSync], ["br", brotliCompressSync]] as const) {
      const answer = await rawCall(server.port, DECIDE_PATH, envelope(compress(decideInput()), 1), { "x-api-key": keys.keys.test.secret, "grpc-encoding": encoding });
      expect(answer.trailers["grpc-status"], encoding).toBe("0");
    }
    // 4 KB of gzip that expands past the message limit: refused as a message over it, never expanded whole.
    const bomb = await rawCall(server.port, DECIDE_PATH, envelope(gzipSync(Buffer.alloc(4 * 1024 * 1024, 0x20)), 1), { "x-api-key": keys.keys.test.secret, "grpc-encoding": "gzip" });
    expect(bomb.trailers["grpc-status"]).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
    expect(bomb.trailers["fraud-error-code"]).toBe("PAYLOAD_TOO_LARGE");
    const unknown = await rawCall(server.port, DECIDE_PATH, envelope(decideInput(), 1), { "x-api-key": keys.keys.test.secret, "grpc-encoding": "snappy" });
    expect(unknown.trailers["grpc-status"]).toBe(String(grpc.status.UNIMPLEMENTED));
    expect(decodeURIComponent(unknown.trailers["grpc-message"] as string)).toMatch(/snappy/);
  });

  it("answers DEADLINE_EXCEEDED when the call outlives its grpc-timeout", async () => {
    const slow = await startTestServer({ config: { comprehensiveBudgetMs: 5_000, engineThreads: 1 }, storeLatencyMs: 300 });
    try {
      const slowKeys = slow.createAccount("slow");
      const answer = await rawCall(slow.port, DECIDE_PATH, envelope(decideInput()), { "x-api-key": slowKeys.keys.test.secret, "grpc-timeout": "50m" });
      expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      expect(answer.data.length).toBe(0);
      // A client that never finishes sending its message gets the same answer at its deadline.
      const unfinished = await rawCall(slow.port, DECIDE_PATH, envelope(decideInput()).subarray(0, 10), { "x-api-key": slowKeys.keys.test.secret, "grpc-timeout": "50m" }, { leaveOpen: true });
      expect(unfinished.trailers["grpc-status"]).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      expect((await fetch(`${slow.url}/api/health/live`)).status).toBe(200);
      // The client picked the deadline: its expiry is not the service's fault, and leaves the status operational.
      const metrics = await (await fetch(`${slow.url}/api/metrics`)).text();
      // Both held under 100 ms by the handler (50 ms deadlines, the second one's spent waiting for its message).
      expect(metrics).toMatch(/fraud_requests_total\{route="\/fraud\.v1\.DecisionService\/Decide",protocol="grpc",outcome="client_error",code="TIMEOUT"\} 2/);
      expect(metrics).not.toMatch(/route="\/fraud\.v1\.DecisionService\/Decide",protocol="grpc",outcome="server_error"/);
      const status = (await (await fetch(`${slow.url}/api/v1/status?public=true`)).json()) as { data: { status: string } };
      expect(status.data.status).toBe("operational");
    } finally {
      await slow.close();
    }
  });

  it("enforces the deadline on Connect and gRPC-Web too, and still records the decide across a shutdown", async () => {
    const dataDir = tempDir();
    const slow = await startTestServer({ config: { dataDir, comprehensiveBudgetMs: 5_000, engineThreads: 1 }, storeLatencyMs: 400 });
    try {
      const key = slow.createAccount("slow").keys.test.secret;
      const connect = await fetch(`${slow.url}/fraud.v1.DecisionService/Decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "connect-timeout-ms": "50", "x-api-key": key },
        body: JSON.stringify({ userId: "late_connect", action: "login", ip: "81.2.69.160" }),
      });
      // Answered at the deadline (without it, the answer would be the decision, once the 400 ms reads are done).
      expect(connect.status).toBe(504);
      expect(await connect.json()).toMatchObject({ code: "deadline_exceeded" });
      expect(connect.headers.get("fraud-error-code")).toBe("TIMEOUT");
      const client = createClient(DecisionService, createGrpcWebTransport({ baseUrl: slow.url, httpVersion: "1.1" }));
      await expect(client.decide({ userId: "late_grpc_web", action: "login", ip: "81.2.69.160" }, { headers: { "x-api-key": key }, timeoutMs: 50 })).rejects.toMatchObject({
        code: Code.DeadlineExceeded,
      });
      // The handler held these calls 50 ms, under SLOW_HANDLER_MS: the clients' deadlines, not the service's fault.
      const metricsText = async () => (await fetch(`${slow.url}/api/metrics`)).text();
      expect(await metricsText()).not.toMatch(/outcome="server_error",code="TIMEOUT"/);
      // One the handler held 300 ms is: the service was too slow for a reasonable deadline.
      const held = await fetch(`${slow.url}/fraud.v1.DecisionService/Decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "connect-timeout-ms": "300", "x-api-key": key },
        body: JSON.stringify({ userId: "late_held", action: "login", ip: "81.2.69.160" }),
      });
      expect(held.status).toBe(504);
      expect(await metricsText()).toMatch(/fraud_requests_total\{route="\/fraud\.v1\.DecisionService\/Decide",protocol="connect",outcome="server_error",code="TIMEOUT"\} 1/);
      // A deadline past what a timer can wait is no deadline: connect-es's own timer would have ended the call at once.
      const distant = await fetch(`${slow.url}/fraud.v1.DecisionService/Decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "connect-timeout-ms": "3000000000", "x-api-key": key },
        body: JSON.stringify({ userId: "late_distant", action: "login", ip: "81.2.69.160" }),
      });
      expect(distant.status).toBe(200);
      // A message still arriving at its deadline is answered then, in the call's protocol, and not run at all.
      const slowlySent = (contentType: string, deadline: Record<string, string>, body: Uint8Array) =>
        new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string; sentWhole: boolean }>((resolve, reject) => {
          let sentWhole = false;
          const req = http.request(`${slow.url}/fraud.v1.DecisionService/Decide`, {
            method: "POST",
            headers: { "content-type": contentType, "x-api-key": key, ...deadline },
          });
          req.on("response", (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (chunk: Buffer) => chunks.push(chunk));
            res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("latin1"), sentWhole }));
          });
          req.on("error", (error) => (sentWhole ? undefined : reject(error)));
          req.write(body.subarray(0, 3));
          const rest = setTimeout(() => {
            sentWhole = true;
            req.end(body.subarray(3));
          }, 3_000);
          req.on("close", () => clearTimeout(rest));
        });
      const expired = await slowlySent("application/json", { "connect-protocol-version": "1", "connect-timeout-ms": "20" }, Buffer.from(JSON.stringify({ userId: "late_expired", action: "login", ip: "81.2.69.160" })));
      expect(expired).toMatchObject({ status: 504, sentWhole: false });
      expect(expired.headers["fraud-error-code"]).toBe("TIMEOUT");
      const grpcWebInput = toBinary(DecideRequestSchema, create(DecideRequestSchema, { userId: "late_expired_web", action: "login", ip: "81.2.69.160" }));
      const expiredWeb = await slowlySent("application/grpc-web+proto", { "grpc-timeout": "20m" }, envelope(grpcWebInput));
      expect(expiredWeb).toMatchObject({ status: 200, sentWhole: false });
      // gRPC-Web's trailers are the body's last frame.
      expect(expiredWeb.body).toMatch(/grpc-status: ?4\r\n/);
      // Nothing ran, so nothing was counted: the next call finds the whole rate limit but for itself.
      const after = await fetch(`${slow.url}/fraud.v1.DecisionService/Decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": key },
        body: JSON.stringify({ userId: "late_after", action: "login", ip: "81.2.69.160" }),
      });
      expect(after.status).toBe(200);
      // Five counted: the three answered at their deadlines while running, the distant one and this one.
      expect(after.headers.get("ratelimit-policy")).toBe('"decide";q=100;w=60');
      expect(after.headers.get("ratelimit")).toMatch(/^"decide";r=95;/);
      await slow.app.settled();
      // A rolling deploy stops the service as soon as the clients have their answers.
      await slow.app.close();
      const db = new Database(path.join(dataDir, "fraud.db"), { readonly: true });
      try {
        expect(db.prepare("SELECT user_id FROM decisions WHERE user_id LIKE 'late_%' ORDER BY user_id").all()).toEqual([
          { user_id: "late_after" },
          { user_id: "late_connect" },
          { user_id: "late_distant" },
          { user_id: "late_grpc_web" },
          { user_id: "late_held" },
        ]);
      } finally {
        db.close();
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("still records a decide whose deadline passed when the service shuts down right after answering", async () => {
    const dataDir = tempDir();
    const slow = await startTestServer({ config: { dataDir, comprehensiveBudgetMs: 5_000, engineThreads: 1 }, storeLatencyMs: 400 });
    try {
      const slowKeys = slow.createAccount("slow");
      const input = toBinary(DecideRequestSchema, create(DecideRequestSchema, { userId: "late_user", action: "login", ip: "81.2.69.160" }));
      const answer = await rawCall(slow.port, DECIDE_PATH, envelope(input), { "x-api-key": slowKeys.keys.test.secret, "grpc-timeout": "50m" });
      expect(answer.trailers["grpc-status"]).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      // A rolling deploy stops the service as soon as the client has its answer.
      await slow.app.close();
      const db = new Database(path.join(dataDir, "fraud.db"), { readonly: true });
      try {
        expect(db.prepare("SELECT count(*) AS n FROM decisions WHERE user_id = 'late_user'").get()).toEqual({ n: 1 });
      } finally {
        db.close();
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
