import http2 from "node:http2";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConnectionTimeouts } from "../src/server/listener.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

// Short timeouts, so that a request never finished is answered within the test.
const TIMEOUTS: ConnectionTimeouts = { headersMs: 300, requestMs: 600, idleMs: 5_000, checkIntervalMs: 100 };

let server: TestServer;
let secret: string;

beforeAll(async () => {
  server = await startTestServer({ connectionTimeouts: TIMEOUTS });
  secret = server.createAccount().keys.test.secret;
});
afterAll(() => server.close());

/** Writes `text` on a raw connection and resolves with all that came back once the server closed it. */
function rawHttp1(text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, "127.0.0.1", () => socket.write(text));
    let answer = "";
    socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
    socket.on("error", reject);
    socket.on("close", () => resolve(answer));
  });
}

interface Refusal {
  status: number;
  headers: Map<string, string>;
  body: { success: boolean; error: { code: string; message: string; details: object }; meta: { requestId: string } };
}

function parseAnswer(answer: string): Refusal {
  const [head = "", body = ""] = answer.split("\r\n\r\n", 2);
  const [statusLine = "", ...lines] = head.split("\r\n");
  const headers = new Map(lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]));
  expect(Buffer.byteLength(body)).toBe(Number(headers.get("content-length")));
  return { status: Number(statusLine.split(" ")[1]), headers, body: JSON.parse(body) as Refusal["body"] };
}

/** The answers on one connection, in order, each read to the end of its Content-Length. */
function splitAnswers(text: string): Refusal[] {
  const answers: Refusal[] = [];
  let rest = Buffer.from(text, "latin1");
  while (rest.length > 0) {
    const headEnd = rest.indexOf("\r\n\r\n");
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(rest.subarray(0, headEnd).toString("latin1"))?.[1]);
    answers.push(parseAnswer(rest.subarray(0, headEnd + 4 + length).toString("latin1")));
    rest = rest.subarray(headEnd + 4 + length);
  }
  return answers;
}

/** The `request` log line of a request id. */
function logLine(requestId: string): Record<string, unknown> | undefined {
  const line = server.logs.find((l) => l.includes(requestId) && l.includes('"msg":"request"'));
  return line === undefined ? undefined : (JSON.parse(line) as Record<string, unknown>);
}

const UNREADABLE: Array<[string, string, RegExp]> = [
  ["two different Content-Length headers", "POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", /more than one Content-Length header/],
  ["two identical Content-Length headers", "POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", /more than one Content-Length header/],
  ["Content-Length with Transfer-Encoding: chunked", "POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", /Transfer-Encoding together with a Content-Length/],
  // llhttp calls this one an invalid Content-Length, by its code.
  ["Transfer-Encoding: chunked, then a Content-Length", "POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", /Transfer-Encoding together with a Content-Length/],
  ["a folded header line", "GET /api/health HTTP/1.1\r\nHost: x\r\nX-Note: a\r\n b\r\n\r\n", /folded onto the one before/],
  ["method FOO", "FOO /api/health HTTP/1.1\r\nHost: x\r\n\r\n", /a method that is not an HTTP method/],
  ["a request target without a leading slash", "GET api/health HTTP/1.1\r\nHost: x\r\n\r\n", /a request target that is neither a path starting with \//],
];

describe("a request Node's HTTP/1.1 parser cannot read", () => {
  for (const [name, request, message] of UNREADABLE) {
    it(`is answered 400 VALIDATION_ERROR in the error envelope, with its request id, and logged: ${name}`, async () => {
      const answer = parseAnswer(await rawHttp1(request));
      expect(answer.status).toBe(400);
      expect(answer.headers.get("connection")).toBe("close");
      expect(answer.headers.get("content-type")).toBe("application/json; charset=utf-8");
      expect(answer.headers.get("fraud-error-code")).toBe("VALIDATION_ERROR");
      const requestId = answer.headers.get("x-request-id") ?? "";
      expect(requestId).toMatch(/^req_/);
      expect(answer.body).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR", details: {} }, meta: { requestId } });
      expect(answer.body.error.message).toMatch(/^malformed HTTP\/1\.1 request: /);
      expect(answer.body.error.message).toMatch(message);
      expect(logLine(requestId)).toMatchObject({ level: "info", route: "unmatched", protocol: "rest", status: 400, code: "VALIDATION_ERROR" });
    });
  }

  it("answers headers or a URL over Node's limit 431 PAYLOAD_TOO_LARGE, and counts them as client errors", async () => {
    for (const request of [`GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`, `GET /${"a".repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`]) {
      const answer = parseAnswer(await rawHttp1(request));
      expect(answer.status).toBe(431);
      expect(answer.headers.get("fraud-error-code")).toBe("PAYLOAD_TOO_LARGE");
      expect(answer.body.error).toMatchObject({ code: "PAYLOAD_TOO_LARGE", message: "the request line and headers exceed the limit of 16384 bytes" });
      expect(logLine(answer.body.meta.requestId)).toMatchObject({ route: "unmatched", status: 431, code: "PAYLOAD_TOO_LARGE" });
    }
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).toMatch(/fraud_requests_total\{route="unmatched",protocol="rest",outcome="client_error",code="PAYLOAD_TOO_LARGE"\} 2\n/);
  });

  it("answers a body Node cannot read (a chunk size that is not hexadecimal) as the call it is, under its route", async () => {
    const answer = parseAnswer(await rawHttp1(`POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`));
    expect(answer.status).toBe(400);
    expect(answer.headers.get("connection")).toBe("close");
    expect(answer.body.error).toMatchObject({ code: "VALIDATION_ERROR", message: "malformed HTTP/1.1 request: a chunk size that is not hexadecimal" });
    await expect.poll(() => logLine(answer.body.meta.requestId)).toMatchObject({ route: "POST /api/v1/decide", status: 400, code: "VALIDATION_ERROR" });
    // A fault with no words of the service's own is told in llhttp's, with its code.
    const unterminated = parseAnswer(await rawHttp1(`POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n`));
    expect(unterminated.status).toBe(400);
    expect(unterminated.body.error.message).toMatch(/^malformed HTTP\/1\.1 request \(HPE_\w+: .*chunk data.*\)$/i);
  });

  it("logs the answer a body Node cannot read draws from an RPC refusal still waiting for that body, not the refusal", async () => {
    // A Connect call without a key is refused once its body is in (over HTTP/1.1): the bad chunk size comes
    // first, and the 400 it draws is what the client reads, so it is what the log and the metrics say.
    const answer = parseAnswer(await rawHttp1("POST /fraud.v1.DecisionService/Decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"));
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatchObject({ code: "VALIDATION_ERROR", message: "malformed HTTP/1.1 request: a chunk size that is not hexadecimal" });
    await expect.poll(() => logLine(answer.body.meta.requestId)).toMatchObject({ route: "/fraud.v1.DecisionService/Decide", status: 400, code: "VALIDATION_ERROR" });
    expect(server.logs.some((line) => line.includes('"response failed"'))).toBe(false);
  });

  it("writes no second answer when a request answered before its body was in then sends a body Node cannot read", async () => {
    // A 404 goes out before the chunked body is read; the bad chunk size after it would have drawn a 400 the
    // client reads as the answer to its next request.
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(server.port, "127.0.0.1", () => socket.write("POST /api/v1/no-such-endpoint HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
      let received = "";
      socket.on("data", (chunk: Buffer) => {
        received += chunk.toString("latin1");
        if (received.includes("\r\n\r\n")) setTimeout(() => socket.write('5\r\n{"use\r\nzz\r\n'), 50);
      });
      socket.on("error", reject);
      socket.on("close", () => resolve(received));
    });
    expect(answer.match(/HTTP\/1\.1 \d{3}/g)).toEqual(["HTTP/1.1 404"]);
    expect(server.logs.filter((line) => line.includes('"msg":"request"') && line.includes("a chunk size that is not hexadecimal"))).toEqual([]);
  });

  it("refuses a transfer coding other than chunked 501 without reading the body, on every path, and stores nothing", async () => {
    const body = JSON.stringify({ userId: "te_gzip_user", action: "login" });
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const request = (path: string, codings: string) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nContent-Type: application/json\r\nTransfer-Encoding: ${codings}\r\n\r\n${chunked}`;
    for (const [path, codings] of [["/api/v1/decide", "gzip, chunked"], ["/api/v1/decide", "identity, chunked"], ["/fraud.v1.DecisionService/Decide", "deflate,chunked"]] as const) {
      const answers = splitAnswers(await rawHttp1(request(path, codings)));
      expect(answers.map((answer) => answer.status), codings).toEqual([501]);
      expect(answers[0]?.headers.get("connection")).toBe("close");
      expect(answers[0]?.body.error).toMatchObject({
        code: "NOT_IMPLEMENTED",
        message: `Transfer-Encoding ${codings} is not supported: send the body with a Content-Length, or with Transfer-Encoding: chunked alone`,
      });
    }
    expect((server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'te_gzip_user'").get() as { n: number }).n).toBe(0);
    // chunked alone, in any case, is read as it always was.
    const plain = splitAnswers(await rawHttp1(request("/api/v1/decide", "Chunked").replace("Host: x\r\n", "Host: x\r\nConnection: close\r\n")));
    expect(plain.map((answer) => answer.status)).toEqual([200]);
  });

  it("answers the requests read whole before an unreadable one on the connection, then refuses it and closes", async () => {
    const decide = (userId: string) => JSON.stringify({ userId, action: "login", ip: "81.2.69.160" });
    const post = (body: string, declaredLength = Buffer.byteLength(body)) =>
      `POST /api/v1/decide HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nContent-Type: application/json\r\nContent-Length: ${declaredLength}\r\n\r\n${body}`;
    const stored = (userId: string) => (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = ?").get(userId) as { n: number }).n;

    // Two decides pipelined, then a request Node cannot parse, all in one write: each decide is stored and its
    // caller gets its answer (it would otherwise retry a decision already made), then the refusal.
    const answers = splitAnswers(await rawHttp1(`${post(decide("piped_1"))}${post(decide("piped_2"))}GET /api/health HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n`));
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 400]);
    expect(answers.slice(0, 2).map((answer) => answer.body.success)).toEqual([true, true]);
    expect(answers[2]?.headers.get("connection")).toBe("close");
    expect(answers[2]?.body.error.message).toMatch(/^malformed HTTP\/1\.1 request: a header line that is not name: value/);
    expect([stored("piped_1"), stored("piped_2")]).toEqual([1, 1]);
    await expect.poll(() => logLine(answers[0]?.body.meta.requestId ?? "")).toMatchObject({ status: 200 });
    await expect.poll(() => logLine(answers[2]?.body.meta.requestId ?? "")).toMatchObject({ route: "unmatched", status: 400 });

    // A Content-Length shorter than the body: the decide reads what was declared (not JSON: 400), and the
    // rest of the body, read as the next request, is refused after it.
    const short = splitAnswers(await rawHttp1(post(decide("short_length"), 10)));
    expect(short.map((answer) => [answer.status, answer.body.error.code])).toEqual([[400, "VALIDATION_ERROR"], [400, "VALIDATION_ERROR"]]);
    expect(short[1]?.body.error.message).toMatch(/^malformed HTTP\/1\.1 request/);
  });

  it("refuses an HTTP/1.1 request without Host in the error envelope (Node's own check answered a bare 400)", async () => {
    const answer = parseAnswer(await rawHttp1("GET /api/health HTTP/1.1\r\n\r\n"));
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatchObject({ code: "VALIDATION_ERROR", message: "an HTTP/1.1 request must carry a Host header" });
    await expect.poll(() => logLine(answer.body.meta.requestId)).toMatchObject({ route: "unmatched", status: 400 });
    // HTTP/1.0 has no Host header to require.
    expect(await rawHttp1("GET /api/health/live HTTP/1.0\r\n\r\n")).toMatch(/^HTTP\/1\.1 200 /);
  });

  it("keeps Node's 408 for a request not whole in time, its headers or its body, and logs the call so", async () => {
    expect(await rawHttp1("GET /api/health HTTP/1.1\r\nHost: x\r\n")).toBe("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n");
    const logged = server.logs.length;
    for (const [path, contentType] of [["/api/v1/decide", "application/json"], ["/fraud.v1.DecisionService/Decide", "application/json"]]) {
      expect(await rawHttp1(`POST ${path} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${secret}\r\nContent-Type: ${contentType}\r\nContent-Length: 100\r\n\r\n{"u`)).toBe(
        "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n",
      );
    }
    // The calls whose bodies did not come in time, as a client that did not send them, not as one that went away (499).
    const calls = () =>
      server.logs
        .slice(logged)
        .map((line) => JSON.parse(line) as { msg: string; route?: string; status?: number; code?: string; level?: string })
        .filter((line) => line.msg === "request")
        .map(({ route, status, code, level }) => ({ route, status, code, level }));
    await expect.poll(() => calls().length).toBe(2);
    expect(calls()).toEqual([
      { route: "POST /api/v1/decide", status: 408, code: "TIMEOUT", level: "info" },
      { route: "/fraud.v1.DecisionService/Decide", status: 408, code: "TIMEOUT", level: "info" },
    ]);
  });
});

describe("CONNECT, which asks a proxy for a tunnel", () => {
  const message = "no endpoint CONNECT example.com:443: the service opens no tunnels (it is no proxy)";

  it("is answered 404 in the error envelope over HTTP/1.1 (Node dropped it unanswered), logged, and the connection closed", async () => {
    const refusal = parseAnswer(await rawHttp1("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"));
    expect(refusal.status).toBe(404);
    expect(refusal.headers.get("connection")).toBe("close");
    expect(refusal.body.error).toMatchObject({ code: "NOT_FOUND", message });
    await expect.poll(() => logLine(refusal.body.meta.requestId)).toMatchObject({ route: "unmatched", status: 404, code: "NOT_FOUND" });
    // The service goes on serving.
    expect((await fetch(`${server.url}/api/health/live`)).status).toBe(200);
  });

  it("is answered the same over HTTP/2 (Node answered a bare 405 no log saw)", async () => {
    const session = http2.connect(server.url);
    try {
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({ ":method": "CONNECT", ":authority": "example.com:443" });
        let status = 0;
        let body = "";
        stream.on("response", (headers) => (status = Number(headers[":status"])));
        stream.setEncoding("utf8");
        stream.on("data", (chunk: string) => (body += chunk));
        stream.on("end", () => resolve({ status, body }));
        stream.on("error", reject);
      });
      expect(answer.status).toBe(404);
      const body = JSON.parse(answer.body) as Refusal["body"];
      expect(body.error).toMatchObject({ code: "NOT_FOUND", message });
      await expect.poll(() => logLine(body.meta.requestId)).toMatchObject({ route: "unmatched", status: 404, code: "NOT_FOUND" });
    } finally {
      session.destroy();
    }
  });
});
