import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { fromBinary, toBinary, create } from "@bufbuild/protobuf";
import { StatusService, GetStatusRequestSchema, GetStatusResponseSchema } from "../gen/fraud/v1/status_pb.js";
import { Health, HealthCheckRequestSchema, HealthCheckResponseSchema, HealthCheckResponse_ServingStatus } from "../gen/health/v1/health_pb.js";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionResponse,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflectionRequestSchema as AlphaRequestSchema,
  ServerReflectionResponseSchema as AlphaResponseSchema,
  type ServerReflectionResponse as AlphaResponse,
} from "../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { grpcClient, grpcUnary } from "./helpers/grpc.js";
import { startTestServer, type TestServer } from "./helpers/server.js";
import { pumpUpload } from "./helpers/upload.js";

let server: TestServer;
let secret: string;
let publishable: string;

beforeAll(async () => {
  server = await startTestServer();
  const account = server.createAccount();
  secret = account.keys.test.secret;
  publishable = account.keys.test.publishable;
});
afterAll(() => server.close());

/** Decide over gRPC with a JSON message (`application/grpc+json`, which Connect's handler serves): its trailers. */
async function grpcJsonDecide(message: Buffer): Promise<http2.IncomingHttpHeaders> {
  const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
  envelope.writeUInt32BE(message.length, 1);
  const session = http2.connect(server.url);
  try {
    return await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      const stream = session.request({ ":method": "POST", ":path": "/fraud.v1.DecisionService/Decide", "content-type": "application/grpc+json", te: "trailers", "x-api-key": secret });
      stream.on("trailers", resolve);
      stream.on("error", reject);
      stream.resume();
      stream.end(envelope);
    });
  } finally {
    session.close();
  }
}

describe("one port, four protocols", () => {
  it("serves the REST JSON API over HTTP/1.1", async () => {
    const res = await fetch(`${server.url}/api/v1/status?public=true`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { success: boolean; data: { status: string; components: Array<{ name: string }> } };
    expect(body.success).toBe(true);
    expect(body.data.components.map((c) => c.name)).toEqual(["API Edge", "API Node", "Dashboard", "Data Sync"]);
  });

  for (const [name, makeTransport] of [
    ["Connect JSON over HTTP/1.1", () => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", useBinaryFormat: false })],
    ["Connect binary over HTTP/2 (h2c)", () => createConnectTransport({ baseUrl: server.url, httpVersion: "2", useBinaryFormat: true })],
    ["gRPC-Web over HTTP/1.1", () => createGrpcWebTransport({ baseUrl: server.url, httpVersion: "1.1" })],
    ["gRPC over h2c with connect-node", () => createGrpcTransport({ baseUrl: server.url })],
  ] as const) {
    it(`serves ${name}`, async () => {
      const client = createClient(StatusService, makeTransport());
      const res = await client.getStatus({}, { headers: { "x-api-key": secret } });
      expect(res.status).toBe("operational");
      expect(res.components).toHaveLength(4);
      expect(res.components[0]?.metrics).toBeDefined();
    });
  }

  it("refuses a Connect JSON body with an unknown field, as REST does, and records nothing", async () => {
    const count = () => (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'typo_user'").get() as { n: number }).n;
    const body = JSON.stringify({ userId: "typo_user", action: "checkout", ip: "81.2.69.160", ammount: 5000, currency: "EUR" });
    const connect = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": secret },
      body,
    });
    expect(connect.status).toBe(400);
    expect((await connect.json()) as { code: string; message: string }).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/ammount/) });
    const rest = await fetch(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": secret }, body });
    expect(rest.status).toBe(400);
    await server.app.settled();
    expect(count()).toBe(0);
  });

  it("refuses a JSON body that is not UTF-8 on every protocol, as REST does, and records nothing", async () => {
    const count = () => (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id LIKE 'bad%id'").get() as { n: number }).n;
    const body = Buffer.concat([Buffer.from('{"userId":"bad'), Buffer.from([0xff, 0xfe]), Buffer.from('id","action":"login","ip":"81.2.69.160"}')]);
    const connect = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": secret },
      body,
    });
    expect(connect.status).toBe(400);
    expect(await connect.json()).toMatchObject({ code: "invalid_argument", message: "request body is not valid UTF-8" });
    const trailers = await grpcJsonDecide(body);
    expect(trailers["grpc-status"]).toBe("3");
    expect(decodeURIComponent(String(trailers["grpc-message"]))).toBe("request body is not valid UTF-8");
    // A streaming call reads its message inside the interceptors: the same answer, the client's error, nothing logged as a fault.
    for (const message of [Buffer.from([0x7b, 0x22, 0x73, 0x65, 0x72, 0x76, 0x69, 0x63, 0x65, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), Buffer.from('{"service":')]) {
      const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
      envelope.writeUInt32BE(message.length, 1);
      const watch = await fetch(`${server.url}/grpc.health.v1.Health/Watch`, { method: "POST", headers: { "content-type": "application/connect+json" }, body: envelope });
      const end = JSON.parse(new TextDecoder().decode(new Uint8Array(await watch.arrayBuffer()).subarray(5))) as { error: { code: string } };
      expect(end.error.code).toBe("invalid_argument");
    }
    expect(server.logs.some((line) => line.includes('"unhandled error"'))).toBe(false);
    const rest = await fetch(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": secret }, body });
    expect(rest.status).toBe(400);
    await server.app.settled();
    expect(count()).toBe(0);
  });

  it("counts a gRPC call the RPC library refuses by the status in its trailers, not as a success", async () => {
    // Under the service's code for it, which the trailers carry too.
    const count = async () =>
      Number(/fraud_requests_total\{route="\/fraud\.v1\.DecisionService\/Decide",protocol="grpc",outcome="client_error",code="VALIDATION_ERROR"\} (\d+)/.exec(await (await fetch(`${server.url}/api/metrics`)).text())?.[1] ?? 0);
    const before = await count();
    const trailers = await grpcJsonDecide(Buffer.from(JSON.stringify({ userId: "u", action: "login", ammount: 5 })));
    expect(trailers["grpc-status"]).toBe("3");
    expect(trailers["fraud-error-code"]).toBe("VALIDATION_ERROR");
    await expect.poll(count).toBe(before + 1);
  });

  it("refuses a call without a valid key before it reads the message, on every protocol, whatever the message holds", async () => {
    const DECIDE = "/fraud.v1.DecisionService/Decide";
    const junk = new Uint8Array([0x0a, 0x64, 0x01]);
    const framed = new Uint8Array([0, 0, 0, 0, junk.length, ...junk]);
    for (const headers of [{}, { "x-api-key": "sk_test_nope" }] as Array<Record<string, string>>) {
      // Connect, binary and JSON: 401 and its JSON error, the service's code beside it.
      for (const [contentType, body] of [["application/proto", junk], ["application/json", '{"userId":1']] as const) {
        const res = await fetch(`${server.url}${DECIDE}`, { method: "POST", headers: { "content-type": contentType, "connect-protocol-version": "1", ...headers }, body });
        expect(res.status, contentType).toBe(401);
        expect(res.headers.get("fraud-error-code")).toBe("UNAUTHORIZED");
        expect(res.headers.get("x-request-id")).toMatch(/^req_/);
        expect(await res.json()).toMatchObject({ code: "unauthenticated", message: expect.stringMatching(/API key/) });
      }
      // gRPC-Web: its status in the headers of a trailers-only answer.
      const web = await fetch(`${server.url}${DECIDE}`, { method: "POST", headers: { "content-type": "application/grpc-web+proto", ...headers }, body: framed });
      expect(web.status).toBe(200);
      expect(web.headers.get("grpc-status")).toBe(String(grpc.status.UNAUTHENTICATED));
      expect(web.headers.get("fraud-error-code")).toBe("UNAUTHORIZED");
      // gRPC, a JSON payload (Connect's gRPC, not the unary path): the status in the trailers.
      const status = await new Promise<string | undefined>((resolve, reject) => {
        const session = http2.connect(server.url);
        const stream = session.request({ ":method": "POST", ":path": DECIDE, "content-type": "application/grpc+json", te: "trailers", ...headers });
        stream.on("trailers", (trailers) => resolve(trailers["grpc-status"] as string | undefined));
        stream.on("response", (answer) => {
          if (answer["grpc-status"] !== undefined) resolve(answer["grpc-status"] as string);
        });
        stream.on("error", reject);
        stream.on("close", () => session.close());
        stream.resume();
        stream.end(new Uint8Array([0, 0, 0, 0, 11, ...new TextEncoder().encode('{"userId":1')]));
      });
      expect(status).toBe(String(grpc.status.UNAUTHENTICATED));
    }
    // A publishable key on a secret key's operation: PERMISSION_DENIED, its message unread too.
    const feedback = await fetch(`${server.url}/fraud.v1.FeedbackService/SubmitFeedback`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": publishable },
      body: "not json",
    });
    expect(feedback.status).toBe(403);
    expect(await feedback.json()).toMatchObject({ code: "permission_denied" });
  });

  it("keeps the public status operational when clients send bytes that do not decode", async () => {
    // Counted as the client's error, under the code it was answered with.
    const malformed = async () =>
      Number(/fraud_requests_total\{route="\/fraud\.v1\.DecisionService\/Decide",protocol="connect",outcome="client_error",code="VALIDATION_ERROR"\} (\d+)/.exec(await (await fetch(`${server.url}/api/metrics`)).text())?.[1] ?? 0);
    const before = await malformed();
    for (let i = 0; i < 30; i++) {
      const junk = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, {
        method: "POST",
        headers: { "content-type": "application/proto", "connect-protocol-version": "1", "x-api-key": secret },
        body: new Uint8Array([0x0a, 0x64, 0x01]),
      });
      // connect-es calls undecodable bytes "internal" (500); the service answers them as the request's fault.
      expect(junk.status).toBe(400);
      expect(junk.headers.get("fraud-error-code")).toBe("VALIDATION_ERROR");
      expect(((await junk.json()) as { code: string; message: string })).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/^parse binary: /) });
      expect(junk.headers.get("x-request-id")).toMatch(/^req_/);
    }
    // gRPC-Web carries its status in the body's trailer frame: 3, not 13.
    const frame = new Uint8Array([0, 0, 0, 0, 3, 0x0a, 0x64, 0x01]);
    const web = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, { method: "POST", headers: { "content-type": "application/grpc-web+proto", "x-api-key": secret }, body: frame });
    const trailer = new TextDecoder().decode(new Uint8Array(await web.arrayBuffer()).subarray(5));
    expect(trailer).toMatch(/^grpc-status: ?3\r$/m);
    expect(trailer).toMatch(/grpc-message: parse(%20| )binary/);
    expect(trailer).toMatch(/fraud-error-code: VALIDATION_ERROR/);
    // A streaming call reads its message inside the interceptors: the same answer, and no error logged.
    const streamed = await fetch(`${server.url}/grpc.health.v1.Health/Watch`, { method: "POST", headers: { "content-type": "application/grpc-web+proto" }, body: frame });
    const streamTrailer = new TextDecoder().decode(new Uint8Array(await streamed.arrayBuffer()).subarray(5));
    expect(streamTrailer).toMatch(/^grpc-status: ?3\r$/m);
    expect(streamTrailer).toMatch(/fraud-error-code: VALIDATION_ERROR/);
    expect(server.logs.some((line) => line.includes('"unhandled error"'))).toBe(false);
    expect((await malformed()) - before).toBe(30);
    const status = (await (await fetch(`${server.url}/api/v1/status?public=true`)).json()) as { data: { status: string; components: Array<{ name: string; status: string }> } };
    expect(status.data.status).toBe("operational");
    expect(status.data.components.every((component) => component.status === "operational")).toBe(true);
  });

  it("refuses a unary call that carried no request message, or two, as the client's fault on every protocol, not UNIMPLEMENTED", async () => {
    const DECIDE = "/fraud.v1.DecisionService/Decide";
    const decide = new TextEncoder().encode(JSON.stringify({ userId: "u", action: "login" }));
    const frame = (message: Uint8Array, flags = 0) => {
      const bytes = new Uint8Array(5 + message.length);
      bytes[0] = flags;
      new DataView(bytes.buffer).setUint32(1, message.length);
      bytes.set(message, 5);
      return bytes;
    };
    const twoMessages = new Uint8Array([...frame(decide), ...frame(decide)]);
    const none = "protocol error: a unary call takes one request message; this one carried none";
    const several = "protocol error: a unary call takes one request message; this one carried more than one";
    // gRPC-Web over HTTP/1.1: no message, only a trailer frame, two messages.
    for (const [body, message] of [[new Uint8Array(0), none], [frame(new Uint8Array(0), 0x80), none], [twoMessages, several]] as const) {
      const web = await fetch(`${server.url}${DECIDE}`, { method: "POST", headers: { "content-type": "application/grpc-web+json", "x-api-key": secret }, body });
      const trailer = new TextDecoder().decode(new Uint8Array(await web.arrayBuffer()).subarray(5));
      expect(trailer).toMatch(/^grpc-status: ?3\r$/m);
      expect(trailer).toMatch(/^fraud-error-code: VALIDATION_ERROR\r$/m);
      expect(decodeURIComponent(/^grpc-message: ?(.*)\r$/m.exec(trailer)?.[1] ?? "")).toBe(message);
      const requestId = web.headers.get("x-request-id") ?? "";
      await expect.poll(() => server.logs.find((line) => line.includes(requestId) && line.includes('"msg":"request"'))).toMatch(/"code":"VALIDATION_ERROR"/);
    }
    // gRPC-Web over HTTP/2, and gRPC with JSON messages (Connect's handler): no message.
    const session = http2.connect(server.url);
    try {
      for (const contentType of ["application/grpc-web+proto", "application/grpc+json"]) {
        const stream = session.request({ ":method": "POST", ":path": DECIDE, "content-type": contentType, te: "trailers", "x-api-key": secret });
        stream.end();
        const chunks: Buffer[] = [];
        stream.on("data", (chunk: Buffer) => chunks.push(chunk));
        const fields = await new Promise<http2.IncomingHttpHeaders>((resolve) => {
          let headers: http2.IncomingHttpHeaders = {};
          stream.on("response", (received) => (headers = received));
          stream.on("trailers", (trailers) => resolve({ ...headers, ...trailers }));
          stream.on("end", () => resolve(headers));
        });
        const status = fields["grpc-status"] ?? /^grpc-status: ?(\d+)\r$/m.exec(Buffer.concat(chunks).subarray(5).toString())?.[1];
        expect(status, contentType).toBe("3");
      }
    } finally {
      session.close();
    }
    // What is not implemented still says so: a compression the router does not take.
    const compressed = await fetch(`${server.url}${DECIDE}`, { method: "POST", headers: { "content-type": "application/grpc-web+json", "grpc-encoding": "snappy", "x-api-key": secret }, body: frame(decide, 1) });
    expect(new TextDecoder().decode(new Uint8Array(await compressed.arrayBuffer()).subarray(5))).toMatch(/^fraud-error-code: NOT_IMPLEMENTED\r$/m);
  });

  it("answers a method it does not have with UNIMPLEMENTED in the caller's own protocol", async () => {
    const client = grpcClient(server.port);
    try {
      const error = await new Promise<grpc.ServiceError | null>((resolve) => {
        client.makeUnaryRequest("/fraud.v1.DecisionService/Nope", (m: Buffer) => m, (b: Buffer) => b, Buffer.alloc(0), new grpc.Metadata(), (e) => resolve(e));
      });
      expect(error?.code, error?.details).toBe(grpc.status.UNIMPLEMENTED);
      expect(error?.details).toMatch(/no RPC method fraud\.v1\.DecisionService\/Nope/);
      // A streaming call that never ends its side (a bidi stream, reflection on a wrong base URL) gets the status
      // at once, not a reset when the request timeout (30 s) closes it: with a 5 s deadline it would read DEADLINE_EXCEEDED.
      const streamed = await new Promise<grpc.ServiceError>((resolve) => {
        const call = client.makeBidiStreamRequest("/fraud.v1.DecisionService/NopeStream", (m: Buffer) => m, (b: Buffer) => b, new grpc.Metadata(), {
          deadline: Date.now() + 5_000,
        });
        call.on("error", resolve);
        call.on("data", () => undefined);
        call.write(Buffer.alloc(16));
      });
      expect(streamed.code, streamed.details).toBe(grpc.status.UNIMPLEMENTED);
      expect(streamed.details).toMatch(/no RPC method fraud\.v1\.DecisionService\/NopeStream/);
    } finally {
      client.close();
    }
    // gRPC-Web reads no HTTP trailers, on HTTP/2 either: the status comes in the headers.
    const session = http2.connect(server.url);
    try {
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
        const stream = session.request({ ":method": "POST", ":path": "/fraud.v1.DecisionService/Nope", "content-type": "application/grpc-web+proto", "x-grpc-web": "1" });
        stream.on("response", resolve);
        stream.on("error", reject);
        stream.resume();
        stream.end(Buffer.from([0, 0, 0, 0, 0]));
      });
      expect(headers).toMatchObject({ ":status": 200, "grpc-status": "12" });
    } finally {
      session.close();
    }
    const connect = await fetch(`${server.url}/fraud.v1.DecisionService/Nope`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1" },
      body: "{}",
    });
    expect(connect.status).toBe(404);
    // The service's code for an unknown path, NOT_FOUND, goes with it as with every error it answers.
    expect(connect.headers.get("fraud-error-code")).toBe("NOT_FOUND");
    expect(await connect.json()).toMatchObject({ code: "unimplemented", message: expect.stringMatching(/Nope/), details: [{ type: "fraud.v1.ErrorDetail", debug: { code: "NOT_FOUND" } }] });
    // application/proto is Connect's content type alone: an RPC call even without Connect's version header.
    const binary = await fetch(`${server.url}/fraud.v1.DecisionService/Nope`, { method: "POST", headers: { "content-type": "application/proto" }, body: new Uint8Array(0) });
    expect(binary.status).toBe(404);
    expect(await binary.json()).toMatchObject({ code: "unimplemented", message: expect.stringMatching(/Nope/) });
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).toMatch(/fraud_requests_total\{route="unmatched",protocol="grpc",outcome="client_error",code="NOT_FOUND"\} 2/);
  });

  it("serves gRPC over h2c to @grpc/grpc-js, the canonical client", async () => {
    const client = grpcClient(server.port);
    try {
      const result = await grpcUnary(client, StatusService, "GetStatus", GetStatusRequestSchema, GetStatusResponseSchema, { public: true });
      expect(result.error).toBeNull();
      expect(result.response?.status).toBe("operational");
      expect(result.response?.components[0]?.metrics).toBeUndefined();
    } finally {
      client.close();
    }
  });

  it("answers the standard gRPC health check", async () => {
    const client = grpcClient(server.port);
    try {
      const ok = await grpcUnary(client, Health, "Check", HealthCheckRequestSchema, HealthCheckResponseSchema, { service: "" });
      expect(ok.response?.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      // Every service reflection lists, the health and reflection services included.
      for (const service of ["fraud.v1.DecisionService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]) {
        const named = await grpcUnary(client, Health, "Check", HealthCheckRequestSchema, HealthCheckResponseSchema, { service });
        expect(named.response?.status, service).toBe(HealthCheckResponse_ServingStatus.SERVING);
      }
      const unknown = await grpcUnary(client, Health, "Check", HealthCheckRequestSchema, HealthCheckResponseSchema, { service: "nope.Service" });
      expect(unknown.error?.code).toBe(grpc.status.NOT_FOUND);
    } finally {
      client.close();
    }
  });

  for (const version of ["v1", "v1alpha"] as const) {
    it(`lists services and serves descriptors over gRPC reflection ${version}`, async () => {
      const client = grpcClient(server.port);
      const path = `/grpc.reflection.${version}.ServerReflection/ServerReflectionInfo`;
      const [requestSchema, responseSchema] = version === "v1" ? [ServerReflectionRequestSchema, ServerReflectionResponseSchema] : [AlphaRequestSchema, AlphaResponseSchema];
      try {
        const responses: Array<ServerReflectionResponse | AlphaResponse> = [];
        await new Promise<void>((resolve, reject) => {
          const call = client.makeBidiStreamRequest(
            path,
            (m: unknown) => Buffer.from(toBinary(requestSchema, m as never)),
            (b: Buffer) => fromBinary(responseSchema, b),
            new grpc.Metadata(),
          );
          call.on("data", (r: ServerReflectionResponse | AlphaResponse) => responses.push(r));
          call.on("error", reject);
          call.on("end", () => resolve());
          call.write(create(requestSchema, { messageRequest: { case: "listServices", value: "*" } }));
          call.write(create(requestSchema, { messageRequest: { case: "fileContainingSymbol", value: "fraud.v1.DecisionService" } }));
          call.write(create(requestSchema, { messageRequest: { case: "fileContainingSymbol", value: "fraud.v1.DecisionService.Decide" } }));
          call.write(create(requestSchema, { messageRequest: { case: "fileContainingSymbol", value: "fraud.v1.NoSuchThing" } }));
          // Only in error details: served so that clients can decode a failure's detail.
          call.write(create(requestSchema, { messageRequest: { case: "fileContainingSymbol", value: "fraud.v1.ErrorDetail" } }));
          // An enum value, scoped as a sibling of its enum (grpcurl describe fraud.v1.RESPONSE_SHAPE_ENVELOPE).
          call.write(create(requestSchema, { messageRequest: { case: "fileContainingSymbol", value: "fraud.v1.RESPONSE_SHAPE_ENVELOPE" } }));
          call.end();
        });
        expect(responses).toHaveLength(6);
        const [list, file, method, missing, errorDetail, enumValue] = responses;
        expect(list?.messageResponse.case).toBe("listServicesResponse");
        const names = list?.messageResponse.case === "listServicesResponse" ? list.messageResponse.value.service.map((s) => s.name) : [];
        expect(names).toEqual(expect.arrayContaining(["fraud.v1.DecisionService", "fraud.v1.StatusService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"]));
        for (const response of [file, method]) {
          expect(response?.messageResponse.case).toBe("fileDescriptorResponse");
          const protos = response?.messageResponse.case === "fileDescriptorResponse" ? response.messageResponse.value.fileDescriptorProto : [];
          const fileNames = protos.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes).name);
          expect(fileNames[0]).toBe("fraud/v1/decision.proto");
          expect(fileNames).toEqual(expect.arrayContaining(["fraud/v1/options.proto", "google/protobuf/struct.proto"]));
        }
        expect(missing?.messageResponse.case).toBe("errorResponse");
        const errorFiles = errorDetail?.messageResponse.case === "fileDescriptorResponse" ? errorDetail.messageResponse.value.fileDescriptorProto : [];
        expect(errorFiles.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes).name)[0]).toBe("fraud/v1/errors.proto");
        const enumFiles = enumValue?.messageResponse.case === "fileDescriptorResponse" ? enumValue.messageResponse.value.fileDescriptorProto : [];
        expect(enumFiles.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes).name)[0]).toBe("fraud/v1/options.proto");
      } finally {
        client.close();
      }
    });
  }
});

describe("a gRPC-Web client over HTTP/1.1 sending past the size limit", () => {
  it("gets RESOURCE_EXHAUSTED and its connection closed once it has its answer, not a wait for the request timeout", async () => {
    const declared = 20 * 1024 * 1024;
    const { port } = new URL(server.url);
    const answer = await new Promise<{ body: string; written: number }>((resolve, reject) => {
      const request = http.request({
        host: "127.0.0.1",
        port,
        method: "POST",
        path: "/fraud.v1.DecisionService/Decide",
        headers: { "content-type": "application/grpc-web+proto", "content-length": String(declared + 5), "x-api-key": secret },
      });
      let uploaded = { written: () => 0 };
      let body = "";
      request.on("response", (res) => {
        res.setEncoding("latin1");
        res.on("data", (text: string) => (body += text));
      });
      // The server closes the connection after the answer: the upload stops there, far short of 20 MiB.
      request.on("socket", (socket) => socket.once("close", () => resolve({ body, written: uploaded.written() })));
      request.on("error", (error: NodeJS.ErrnoException) => {
        if (error.code !== "EPIPE" && error.code !== "ECONNRESET") reject(error);
      });
      const head = Buffer.alloc(5);
      head.writeUInt32BE(declared, 1);
      request.write(head);
      uploaded = pumpUpload(request, declared, Buffer.alloc(64 * 1024, 1));
    });
    expect(answer.body).toMatch(/grpc-status: ?8/);
    expect(answer.written).toBeLessThan(declared / 2);
  });
});

describe("an RPC caller not let through over HTTP/1.1, its message over the size limit", () => {
  /** Uploads `declared` bytes (chunked when `chunked`) without a key; resolves with the answer once the server closes the connection. */
  const upload = (contentType: string, declared: number, chunked: boolean) =>
    new Promise<{ head: string; body: string; written: number }>((resolve, reject) => {
      const request = http.request({
        host: "127.0.0.1",
        port: new URL(server.url).port,
        method: "POST",
        path: "/fraud.v1.DecisionService/Decide",
        headers: { "content-type": contentType, ...(chunked ? { "transfer-encoding": "chunked" } : { "content-length": String(declared) }) },
      });
      let uploaded = { written: () => 0 };
      let head = "";
      let body = "";
      request.on("response", (res) => {
        head = `${res.statusCode} connection=${res.headers.connection} grpc-status=${res.headers["grpc-status"]} code=${res.headers["fraud-error-code"]}`;
        res.setEncoding("latin1");
        res.on("data", (text: string) => (body += text));
      });
      request.on("socket", (socket) => socket.once("close", () => resolve({ head, body, written: uploaded.written() })));
      request.on("error", (error: NodeJS.ErrnoException) => {
        if (error.code !== "EPIPE" && error.code !== "ECONNRESET") reject(error);
      });
      uploaded = pumpUpload(request, declared, Buffer.alloc(64 * 1024, 1));
    });

  it("is answered at once and its connection closed, rather than read to its end or to the request timeout", async () => {
    const declared = 20 * 1024 * 1024;
    // Declared over the limit: nothing of it is read (it was read to the request timeout, 30 s, and answered 408).
    const connect = await upload("application/json", declared, false);
    expect(connect.head).toBe("401 connection=close grpc-status=undefined code=UNAUTHORIZED");
    expect(JSON.parse(connect.body)).toMatchObject({ code: "unauthenticated" });
    expect(connect.written).toBeLessThan(declared / 2);
    // Chunked: read up to the limit, no further.
    const web = await upload("application/grpc-web+proto", declared, true);
    expect(web.head).toBe(`200 connection=close grpc-status=${grpc.status.UNAUTHENTICATED} code=UNAUTHORIZED`);
    expect(web.written).toBeLessThan(declared / 2);
  }, 10_000);
});

describe("an HTTP/1.1 client that pipelines without reading its answers", () => {
  it("has its connection closed past 32 requests waiting for their answers, while a few pipelined ones are all answered", async () => {
    const pipeline = (count: number) =>
      new Promise<{ answers: number; closed: boolean }>((resolve, reject) => {
        const socket = net.connect(server.port, "127.0.0.1", () => socket.write("GET /api/health/live HTTP/1.1\r\nHost: x\r\n\r\n".repeat(count)));
        let text = "";
        const answers = () => text.split("HTTP/1.1 200 ").length - 1;
        socket.on("data", (chunk: Buffer) => {
          text += chunk.toString("latin1");
          // All answered: the connection stays open (keep-alive); the test ends it.
          if (answers() === count) {
            socket.destroy();
            resolve({ answers: count, closed: false });
          }
        });
        socket.on("error", () => undefined);
        socket.on("close", () => resolve({ answers: answers(), closed: true }));
        setTimeout(() => reject(new Error(`no end after ${answers()} answers`)), 10_000).unref();
      });
    expect(await pipeline(8)).toEqual({ answers: 8, closed: false });
    const flooded = await pipeline(1_000);
    expect(flooded.closed).toBe(true);
    expect(flooded.answers).toBeLessThanOrEqual(32);
    expect(server.logs.filter((line) => line.includes("too many pipelined requests"))).toHaveLength(1);
  });
});

describe("a caller that resets its HTTP/2 stream while its call runs", () => {
  it("is logged as a caller that went away (499 CANCELED), whatever the reset's code, not as a fault of the service", async () => {
    // The comprehensive path takes 2 s and decide waits for it: the call is still running when the caller resets.
    const slow = await startTestServer({ config: { comprehensiveBudgetMs: 10_000, engineThreads: 1 }, storeLatencyMs: 2_000 });
    try {
      const key = slow.createAccount().keys.test.secret;
      const session = http2.connect(slow.url);
      try {
        const resets = [http2.constants.NGHTTP2_INTERNAL_ERROR, http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_REFUSED_STREAM];
        await Promise.all(
          resets.map(
            (code) =>
              new Promise<void>((resolve, reject) => {
                const stream = session.request({
                  ":method": "POST",
                  ":path": "/fraud.v1.DecisionService/Decide",
                  "content-type": "application/json",
                  "connect-protocol-version": "1",
                  "connect-timeout-ms": "60000",
                  "x-api-key": key,
                });
                stream.on("error", () => undefined);
                stream.on("close", () => resolve());
                stream.end(JSON.stringify({ userId: `reset_${code}`, action: "login", ip: "81.2.69.160" }));
                setTimeout(() => stream.close(code), 300);
                stream.on("response", () => reject(new Error("answered before the reset")));
              }),
          ),
        );
      } finally {
        session.close();
      }
      await expect.poll(() => slow.logs.filter((line) => line.includes('"msg":"request"') && line.includes("/fraud.v1.DecisionService/Decide")).length, { timeout: 5_000 }).toBe(3);
      const lines = slow.logs.filter((line) => line.includes('"msg":"request"') && line.includes("/fraud.v1.DecisionService/Decide"));
      for (const line of lines) expect(line).toMatch(/"status":499,"code":"CANCELED"/);
      expect(slow.logs.filter((line) => line.includes('"level":"error"'))).toEqual([]);
    } finally {
      await slow.close();
    }
  });
});

describe("what the RPC library refuses before any of the service's code runs", () => {
  it("refuses Connect's GET form with 405, Allow: POST and Connect's error body, logged as what it is", async () => {
    for (const method of ["GET", "PUT"]) {
      const query = method === "GET" ? "?connect=v1&encoding=json&message=%7B%7D" : "";
      const res = await fetch(`${server.url}/fraud.v1.StatusService/GetStatus${query}`, { method });
      expect(res.status, method).toBe(405);
      expect(res.headers.get("allow")).toBe("POST, OPTIONS");
      expect(res.headers.get("fraud-error-code")).toBe("METHOD_NOT_ALLOWED");
      expect(await res.json()).toMatchObject({
        code: "unimplemented",
        message: `${method} is not allowed on /fraud.v1.StatusService/GetStatus: RPCs are called with POST`,
        details: [{ type: "fraud.v1.ErrorDetail", debug: { code: "METHOD_NOT_ALLOWED" } }],
      });
      const requestId = res.headers.get("x-request-id") ?? "";
      await expect.poll(() => server.logs.find((line) => line.includes(requestId) && line.includes('"msg":"request"'))).toMatch(/"status":405,"code":"METHOD_NOT_ALLOWED"/);
    }
  });

  it("tells a plain request to the event stream's path that it takes WebSocket connections only", async () => {
    const res = await fetch(`${server.url}/api/v1/events/stream?endpoint=whe_x`);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR", message: expect.stringMatching(/takes WebSocket connections only/) } });
    for (const method of ["POST", "DELETE"]) {
      const other = await fetch(`${server.url}/api/v1/events/stream?endpoint=whe_x`, { method });
      expect(other.status, method).toBe(405);
      expect(other.headers.get("allow")).toBe("GET");
      expect(((await other.json()) as { error: { code: string } }).error.code).toBe("METHOD_NOT_ALLOWED");
    }
  });

  it("stops an HTTP/2 upload over the size limit once its answer has gone, on every protocol, instead of holding it to the request timeout", async () => {
    const session = http2.connect(server.url);
    try {
      for (const [name, path, headers, expected] of [
        ["REST", "/api/v1/decide", { "content-type": "application/json" }, /"code":"PAYLOAD_TOO_LARGE"/],
        ["Connect", "/fraud.v1.DecisionService/Decide", { "content-type": "application/json", "connect-protocol-version": "1" }, /"code":"resource_exhausted"/],
        ["gRPC-Web", "/fraud.v1.DecisionService/Decide", { "content-type": "application/grpc-web+proto" }, /grpc-status: ?8/],
        ["gRPC JSON", "/fraud.v1.DecisionService/Decide", { "content-type": "application/grpc+json", te: "trailers" }, /"grpc-status":"8"/],
        ["gRPC", "/fraud.v1.DecisionService/Decide", { "content-type": "application/grpc", te: "trailers" }, /"grpc-status":"8"/],
        ["gRPC gzip", "/fraud.v1.DecisionService/Decide", { "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip" }, /"grpc-status":"8"/],
        ["unknown method", "/fraud.v1.NoSuchService/Call", { "content-type": "application/grpc", te: "trailers" }, /"grpc-status":"12"/],
      ] as const) {
        const started = performance.now();
        const stream = session.request({ ":method": "POST", ":path": path, "x-api-key": secret, ...headers });
        // The binary protocols' envelope announces 4 MiB; then spaces, sent until the server says stop.
        if (!path.startsWith("/api/") && headers["content-type"] !== "application/json") stream.write(Buffer.from([0, 0, 0x40, 0, 0]));
        const pump = setInterval(() => {
          if (!stream.destroyed && stream.writable) stream.write(Buffer.alloc(32 * 1024, 0x20));
        }, 10);
        let answer = "";
        let requestId = "";
        stream.on("response", (h) => {
          answer += JSON.stringify(h);
          requestId = String(h["x-request-id"]);
        });
        stream.on("trailers", (t) => (answer += JSON.stringify(t)));
        stream.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
        stream.on("error", () => undefined);
        const rstCode = await new Promise<number>((resolve) => stream.on("close", () => resolve(stream.rstCode ?? -1)));
        clearInterval(pump);
        expect(answer, name).toMatch(expected);
        expect(rstCode, name).toBe(http2.constants.NGHTTP2_NO_ERROR);
        // Well before the 30 s request timeout, which cancels (CANCEL) instead.
        expect(performance.now() - started, name).toBeLessThan(10_000);
        // Over on the server too: logged, no longer in flight (shutdown would wait for it).
        await expect.poll(() => server.logs.some((line) => line.includes(requestId) && line.includes('"msg":"request"')), { timeout: 3_000 }).toBe(true);
      }
      // A client that sent the whole of its message over the limit, and ended: what the library left unread is
      // dropped, so the call ends on the server as soon as it is answered.
      for (const headers of [{ "grpc-encoding": "gzip" }, { "content-type": "application/grpc+json" }]) {
        const stream = session.request({ ":method": "POST", ":path": "/fraud.v1.DecisionService/Decide", "content-type": "application/grpc", te: "trailers", "x-api-key": secret, ...headers });
        const declared = 1024 * 1024;
        const head = Buffer.alloc(5);
        head[0] = headers["grpc-encoding"] === undefined ? 0 : 1;
        head.writeUInt32BE(declared, 1);
        stream.end(Buffer.concat([head, Buffer.alloc(declared, 0x20)]));
        let requestId = "";
        let status = "";
        stream.on("response", (h) => (requestId = String(h["x-request-id"])));
        stream.on("trailers", (t) => (status = String(t["grpc-status"])));
        stream.on("data", () => undefined);
        stream.on("error", () => undefined);
        await new Promise<void>((resolve) => stream.on("close", () => resolve()));
        expect(status, JSON.stringify(headers)).toBe("8");
        await expect.poll(() => server.logs.some((line) => line.includes(requestId) && line.includes('"msg":"request"')), { timeout: 3_000 }).toBe(true);
      }
    } finally {
      session.close();
    }
  });

  it("answers a refusal of 1 KiB or more readably to a client that accepts gzip (the router compresses no answer)", async () => {
    const longName = "a".repeat(1_100);
    const connect = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "accept-encoding": "gzip", "x-api-key": secret },
      body: JSON.stringify({ userId: "u", action: "login", [longName]: 1 }),
    });
    expect(connect.status).toBe(400);
    expect(connect.headers.get("fraud-error-code")).toBe("VALIDATION_ERROR");
    expect(((await connect.json()) as { code: string; message: string })).toMatchObject({ code: "invalid_argument", message: expect.stringContaining(longName) });

    const json = new TextEncoder().encode(JSON.stringify({ userId: "u", action: "login", [longName]: 1 }));
    const frame = new Uint8Array(5 + json.length);
    new DataView(frame.buffer).setUint32(1, json.length);
    frame.set(json, 5);
    const web = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+json", "grpc-accept-encoding": "gzip", "x-api-key": secret },
      body: frame,
    });
    const body = new Uint8Array(await web.arrayBuffer());
    expect(body[0]).toBe(0x80);
    const trailer = new TextDecoder().decode(body.subarray(5));
    expect(trailer).toMatch(/^grpc-status: ?3\r$/m);
    expect(trailer).toMatch(/^fraud-error-code: VALIDATION_ERROR\r$/m);
  });

  it("carries the service's error code on every protocol, so that a message too large is not taken for a rate limit", async () => {
    const connect = (body: string | Uint8Array, contentType = "application/json") =>
      fetch(`${server.url}/fraud.v1.DecisionService/Decide`, { method: "POST", headers: { "content-type": contentType, "connect-protocol-version": "1", "x-api-key": secret }, body });
    const unknownField = await connect(JSON.stringify({ userId: "u", action: "login", userID: "x" }));
    expect(unknownField.status).toBe(400);
    expect(unknownField.headers.get("fraud-error-code")).toBe("VALIDATION_ERROR");
    expect(((await unknownField.json()) as { code: string }).code).toBe("invalid_argument");
    // Connect answers resource_exhausted with 429, as it answers a rate limit: the code tells them apart.
    const tooLarge = await connect(new Uint8Array(300_000), "application/proto");
    expect(tooLarge.status).toBe(429);
    expect(tooLarge.headers.get("fraud-error-code")).toBe("PAYLOAD_TOO_LARGE");
    await tooLarge.arrayBuffer();
    // The log and the metrics say what the answer says.
    const requestId = tooLarge.headers.get("x-request-id") ?? "";
    await expect.poll(() => server.logs.find((line) => line.includes(requestId) && line.includes('"msg":"request"'))).toMatch(/"status":429,"code":"PAYLOAD_TOO_LARGE"/);

    const json = new TextEncoder().encode(JSON.stringify({ userId: "u", action: "login", userID: "x" }));
    const frame = new Uint8Array(5 + json.length);
    new DataView(frame.buffer).setUint32(1, json.length);
    frame.set(json, 5);
    const web = await fetch(`${server.url}/fraud.v1.DecisionService/Decide`, { method: "POST", headers: { "content-type": "application/grpc-web+json", "x-api-key": secret }, body: frame });
    const webTrailer = new TextDecoder().decode(new Uint8Array(await web.arrayBuffer()).subarray(5));
    expect(webTrailer).toMatch(/^grpc-status: ?3\r$/m);
    expect(webTrailer).toMatch(/fraud-error-code: VALIDATION_ERROR/);

    // A content type no protocol takes, such as gRPC-Web's text mode (grpc-web's default), is told what is.
    const text = await fetch(`${server.url}/fraud.v1.StatusService/GetStatus`, { method: "POST", headers: { "content-type": "application/grpc-web-text" }, body: "AAAAAAA=" });
    expect(text.status).toBe(415);
    expect(text.headers.get("fraud-error-code")).toBe("UNSUPPORTED_MEDIA_TYPE");
    expect(await text.text()).toMatch(/takes Connect \(application\/json, application\/proto\)[\s\S]*gRPC-Web's text mode \(application\/grpc-web-text\) is not served: use the binary mode/);
    // A streaming method names Connect's streaming types.
    const streamed = await fetch(`${server.url}/grpc.health.v1.Health/Watch`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(streamed.status).toBe(415);
    expect(await streamed.text()).toMatch(/takes Connect \(application\/connect\+json, application\/connect\+proto\)/);

    // gRPC with JSON messages (binary gRPC takes the service's own path, which has always carried the code).
    const session = http2.connect(server.url);
    try {
      const stream = session.request({ ":method": "POST", ":path": "/fraud.v1.DecisionService/Decide", "content-type": "application/grpc+json", te: "trailers", "x-api-key": secret });
      stream.end(frame);
      stream.resume();
      const fields = await new Promise<http2.IncomingHttpHeaders>((resolve) => {
        let headers: http2.IncomingHttpHeaders = {};
        stream.on("response", (received) => (headers = received));
        stream.on("trailers", (trailers) => resolve({ ...headers, ...trailers }));
        stream.on("end", () => resolve(headers));
      });
      expect(fields["grpc-status"]).toBe("3");
      expect(fields["fraud-error-code"]).toBe("VALIDATION_ERROR");
    } finally {
      session.close();
    }
  });
});

describe("shutting down while a streamed answer is under way over HTTP/1.1", () => {
  it("ends the connection once that answer is written, though its headers went out before the drain", async () => {
    const draining = await startTestServer();
    const body = new TextEncoder().encode(JSON.stringify({ service: "" }));
    const envelope = new Uint8Array(5 + body.length);
    new DataView(envelope.buffer).setUint32(1, body.length);
    envelope.set(body, 5);
    const agent = new http.Agent({ keepAlive: true });
    // Another request still coming in holds the drain open, so that only the answer's end can close the connection.
    // (With a key: a call without one is refused before its body is read.)
    const key = draining.createAccount().keys.test.secret;
    const holding = net.connect(draining.port, "127.0.0.1", () =>
      holding.write(`POST /api/v1/webhooks HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{`),
    );
    holding.on("error", () => undefined);
    let closing: Promise<void> | undefined;
    try {
      const outcome = await new Promise<{ connection: string | undefined; closedAfterEndMs: number }>((resolve, reject) => {
        const request = http.request(`${draining.url}/grpc.health.v1.Health/Watch`, {
          method: "POST",
          agent,
          headers: { "content-type": "application/connect+json", "connect-protocol-version": "1" },
        }, (res) => {
          const socket = res.socket;
          let endedAt = 0;
          socket.once("close", () => resolve({ connection: res.headers.connection, closedAfterEndMs: performance.now() - endedAt }));
          // The first message (SERVING) is in: the answer has started; now the server shuts down.
          res.once("data", () => (closing = draining.close()));
          res.resume();
          res.on("end", () => (endedAt = performance.now()));
          setTimeout(() => reject(new Error("the connection was not closed after its answer")), 3_000).unref();
        });
        request.on("error", reject);
        request.end(envelope);
      });
      // Its headers said keep-alive, before the drain began; the connection is closed after the answer instead.
      expect(outcome.connection).toBe("keep-alive");
      expect(outcome.closedAfterEndMs).toBeLessThan(1_000);
    } finally {
      holding.destroy();
      agent.destroy();
      await (closing ?? draining.close());
    }
  });

  it("still answers a request pipelined behind that answer, telling it the connection closes", async () => {
    const draining = await startTestServer();
    const secret = draining.createAccount().keys.test.secret;
    const watchBody = JSON.stringify({ service: "" });
    const envelope = Buffer.alloc(5 + watchBody.length);
    envelope.writeUInt32BE(watchBody.length, 1);
    envelope.write(watchBody, 5);
    const pipelinedBody = JSON.stringify({ payload: "{}", signature: "sha256=00", timestamp: "1", secret: "whsec_x" });
    let closing: Promise<void> | undefined;
    try {
      const answers = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(draining.port, "127.0.0.1", () => {
          socket.write(
            Buffer.concat([
              Buffer.from(`POST /grpc.health.v1.Health/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\nContent-Length: ${envelope.length}\r\n\r\n`),
              envelope,
              // Pipelined behind it, its body not all sent yet: it is still waiting when the drain begins.
              // (With a key: a call without one is refused before its body is read.)
              Buffer.from(`POST /api/v1/webhooks HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nContent-Type: application/json\r\nContent-Length: ${pipelinedBody.length}\r\n\r\n${pipelinedBody.slice(0, 5)}`),
            ]),
          );
        });
        let text = "";
        socket.on("data", (chunk: Buffer) => {
          text += chunk.toString("latin1");
          if (closing === undefined && text.includes("SERVING")) {
            closing = draining.close();
            setTimeout(() => socket.write(pipelinedBody.slice(5)), 50);
          }
        });
        socket.on("error", reject);
        socket.on("close", () => resolve(text));
        setTimeout(() => reject(new Error(`no end: ${text}`)), 5_000).unref();
      });
      const statusLines = answers.match(/^HTTP\/1\.1 \d+ .*$/gm) ?? [];
      expect(statusLines).toHaveLength(2);
      // The second answer, the pipelined request's: its own status, and the connection's end announced.
      const second = answers.slice(answers.lastIndexOf("HTTP/1.1 "));
      expect(second).toMatch(/^HTTP\/1\.1 200 /);
      expect(second).toMatch(/"valid":false/);
      expect(second).toMatch(/^connection: close\r$/im);
    } finally {
      await (closing ?? draining.close());
    }
  });
});
