import http2 from "node:http2";
import net from "node:net";
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./helpers/server.js";

// A client that sends `Expect: 100-continue` holds its body back until the server says 100 Continue: curl does
// for large bodies, and some HTTP libraries for every POST. The service says it only once the call is admitted.

let server: TestServer;
let secret: string;
const body = JSON.stringify({ userId: "user_1", action: "login", ip: "81.2.69.160" });

beforeAll(async () => {
  server = await startTestServer();
  secret = server.createAccount().keys.test.secret;
});
afterAll(() => server.close());

/** A raw HTTP/1.1 connection: what came back so far, and whether the server closed it. */
function rawConnection() {
  const socket = net.connect(server.port, "127.0.0.1");
  let received = "";
  let closed = false;
  socket.on("data", (chunk: Buffer) => (received += chunk.toString("latin1")));
  socket.on("close", () => (closed = true));
  socket.on("error", () => undefined);
  return { socket, received: () => received, closed: () => closed };
}

function head(path: string, headers: Record<string, string>): string {
  const lines = Object.entries({ host: "x", "content-length": String(Buffer.byteLength(body)), expect: "100-continue", ...headers }).map(([name, value]) => `${name}: ${value}`);
  return `POST ${path} HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\n`;
}

describe("Expect: 100-continue over HTTP/1.1", () => {
  it("refuses a caller without a key at once, without asking for the body, and closes the connection", async () => {
    const conn = rawConnection();
    conn.socket.write(head("/api/v1/decide", { "content-type": "application/json" }));
    await expect.poll(() => conn.closed()).toBe(true);
    expect(conn.received()).toMatch(/^HTTP\/1\.1 401 /);
    expect(conn.received()).not.toContain("100 Continue");
    expect(conn.received()).toMatch(/\r\nconnection: close\r\n/i);
    expect(conn.received()).toContain('"code":"UNAUTHORIZED"');
  });

  it("asks an admitted caller for its body, answers it, and keeps the connection", async () => {
    const conn = rawConnection();
    conn.socket.write(head("/api/v1/decide", { "content-type": "application/json", "x-api-key": secret }));
    await expect.poll(() => conn.received()).toBe("HTTP/1.1 100 Continue\r\n\r\n");
    conn.socket.write(body);
    await expect.poll(() => conn.received()).toMatch(/"evidenceId":"evi_/);
    const answer = conn.received().slice("HTTP/1.1 100 Continue\r\n\r\n".length);
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).not.toMatch(/\r\nconnection: close\r\n/i);
    // The connection serves the next request.
    conn.socket.write("GET /api/health/live HTTP/1.1\r\nhost: x\r\n\r\n");
    await expect.poll(() => conn.received().split("HTTP/1.1 200 ").length).toBe(3);
    expect(conn.closed()).toBe(false);
    conn.socket.destroy();
  });

  it("refuses an unknown path, and a Connect call without a key, the same way: no 100, no wait for the body", async () => {
    for (const [path, contentType, status] of [
      ["/api/v1/no-such-endpoint", "application/json", 404],
      ["/fraud.v1.DecisionService/Decide", "application/json", 401],
      ["/fraud.v1.DecisionService/Decide", "application/grpc-web+proto", 200],
    ] as const) {
      const conn = rawConnection();
      conn.socket.write(head(path, { "content-type": contentType }));
      await expect.poll(() => conn.closed()).toBe(true);
      expect(conn.received()).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(conn.received()).not.toContain("100 Continue");
      if (contentType.startsWith("application/grpc-web")) expect(conn.received()).toMatch(/\r\ngrpc-status: 16\r\n/i);
    }
  });
});

describe("Expect: 100-continue over HTTP/2", () => {
  it("answers a refused call without a 100, and asks an admitted one for its body", async () => {
    const session = http2.connect(server.url);
    try {
      const refused = session.request({ ":method": "POST", ":path": "/api/v1/decide", "content-type": "application/json", expect: "100-continue" });
      let askedRefused = false;
      refused.on("continue", () => (askedRefused = true));
      const [refusedHeaders] = (await once(refused, "response")) as [http2.IncomingHttpHeaders];
      expect(refusedHeaders[":status"]).toBe(401);
      expect(askedRefused).toBe(false);
      refused.destroy();

      const admitted = session.request({ ":method": "POST", ":path": "/api/v1/decide", "content-type": "application/json", "x-api-key": secret, expect: "100-continue" });
      admitted.once("continue", () => admitted.end(body));
      const [headers] = (await once(admitted, "response")) as [http2.IncomingHttpHeaders];
      expect(headers[":status"]).toBe(200);
      let text = "";
      admitted.setEncoding("utf8");
      admitted.on("data", (chunk: string) => (text += chunk));
      await once(admitted, "end");
      expect(text).toMatch(/"evidenceId":"evi_/);
    } finally {
      session.close();
    }
  });
});
