// WebSocket delivery with a real `ws` client, on the same port as everything else.
import crypto from "node:crypto";
import http from "node:http";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { MAX_STREAMS_PER_ENDPOINT, type StreamMessage } from "../../src/webhooks/stream.js";
import type { WebhookEvent } from "../../src/webhooks/events.js";
import { ManualClock } from "../helpers/clock.js";
import { UK_IP, HUMAN_DESKTOP, botAttack } from "../helpers/inputs.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

const clock = new ManualClock();
let server: TestServer;
let keys: ReturnType<TestServer["createAccount"]>["keys"];
let accountId: string;
/** Pings this often, so that a client that stops answering is seen within the test (and a loaded machine's pauses are not). */
const HEARTBEAT_MS = 500;

beforeAll(async () => {
  server = await startTestServer({ clock, streamHeartbeatMs: HEARTBEAT_MS });
  const created = server.createAccount();
  keys = created.keys;
  accountId = created.account.id;
});
afterAll(() => server.close());

async function createStreamEndpoint(key: string, events: string[] = [], target = server): Promise<{ id: string; secret: string }> {
  const res = await fetch(`${target.url}/api/v1/webhooks/endpoints`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key },
    body: JSON.stringify({ deliveryMethod: "websocket", events }),
  });
  expect(res.status).toBe(201);
  const { data } = (await res.json()) as { data: { webhook: { id: string; url: string }; secret: string } };
  expect(data.webhook.url).toBe("");
  return { id: data.webhook.id, secret: data.secret };
}

/** Opens the stream; resolves once connected, or with the HTTP status of a refusal. */
function connect(
  query: string,
  headers: Record<string, string>,
  autoPong = true,
  target = server,
): Promise<{ socket: WebSocket; messages: StreamMessage[] } | { refused: number }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://127.0.0.1:${target.port}/api/v1/events/stream${query}`, { headers, autoPong });
    const messages: StreamMessage[] = [];
    socket.on("message", (data) => messages.push(JSON.parse(String(data)) as StreamMessage));
    socket.once("open", () => resolve({ socket, messages }));
    socket.once("unexpected-response", (_req, res) => resolve({ refused: res.statusCode ?? 0 }));
    socket.once("error", reject);
  });
}

async function decide(key = keys.test.secret, target = server): Promise<void> {
  const res = await fetch(`${target.url}/api/v1/decide`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key },
    body: JSON.stringify({ userId: "streamed", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }),
  });
  expect(res.status).toBe(200);
}

describe("WebSocket connections that should not open", () => {
  it("refuses a connection past the endpoint's limit with 409, and takes one again once another has closed", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
    const headers = { "x-api-key": keys.test.secret };
    // Opened at once, so that handshakes under way count as open connections do.
    const opened = await Promise.all(Array.from({ length: MAX_STREAMS_PER_ENDPOINT }, () => connect(`?endpoint=${endpoint.id}`, headers)));
    const sockets = opened.map((result) => {
      if (!("socket" in result)) throw new Error(`refused ${result.refused}`);
      return result.socket;
    });
    expect(await connect(`?endpoint=${endpoint.id}`, headers)).toEqual({ refused: 409 });
    // Another endpoint of the account has a limit of its own.
    const other = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
    const elsewhere = await connect(`?endpoint=${other.id}`, headers);
    expect("socket" in elsewhere).toBe(true);
    if ("socket" in elsewhere) elsewhere.socket.close();

    const first = sockets[0] as WebSocket;
    await new Promise((resolve) => {
      first.once("close", resolve);
      first.close();
    });
    await expect.poll(async () => {
      const again = await connect(`?endpoint=${endpoint.id}`, headers);
      if ("socket" in again) again.socket.close();
      return "socket" in again;
    }).toBe(true);
    for (const socket of sockets) socket.close();
  });
});

describe("WebSocket connections that should end", () => {
  it("closes the stream of a key revoked since it connected, before sending it anything more", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
    const reader = server.app.keys.issue({ accountId, environment: "test", kind: "secret", permissions: ["webhooks:read"], name: "stream reader" }).key;
    const opened = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": reader });
    if (!("socket" in opened)) throw new Error("refused");
    const closed = new Promise<number>((resolve) => opened.socket.once("close", (code) => resolve(code)));
    server.app.keys.revoke(reader);
    // At once: the very next event is not sent.
    await decide();
    await server.app.settled();
    expect(await closed).toBe(1008);
    expect(opened.messages).toEqual([]);
  });

  it("closes the stream of an endpoint deleted or disabled, and refuses to open one on a disabled endpoint", async () => {
    const patch = (id: string, body: unknown) =>
      fetch(`${server.url}/api/v1/webhooks/endpoints/${id}`, { method: "PATCH", headers: { "content-type": "application/json", "x-api-key": keys.test.secret }, body: JSON.stringify(body) });
    for (const end of ["disable", "delete"] as const) {
      const endpoint = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
      const opened = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": keys.test.secret });
      if (!("socket" in opened)) throw new Error("refused");
      const closed = new Promise<[number, string]>((resolve) => opened.socket.once("close", (code, reason) => resolve([code, String(reason)])));
      const res = end === "disable"
        ? await patch(endpoint.id, { status: "disabled" })
        : await fetch(`${server.url}/api/v1/webhooks/endpoints/${endpoint.id}`, { method: "DELETE", headers: { "x-api-key": keys.test.secret } });
      expect(res.ok).toBe(true);
      expect(await closed).toEqual([1008, end === "disable" ? "the endpoint was disabled" : "the endpoint was deleted"]);
      if (end === "disable") {
        expect(await connect(`?endpoint=${endpoint.id}`, { "x-api-key": keys.test.secret })).toEqual({ refused: 409 });
        expect((await patch(endpoint.id, { status: "enabled" })).ok).toBe(true);
        const again = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": keys.test.secret });
        expect("socket" in again).toBe(true);
        if ("socket" in again) again.socket.close();
      }
    }
  });

  it("drops a client that stops answering pings, and keeps one that answers", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
    const silent = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": keys.test.secret }, false);
    const lively = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": keys.test.secret });
    if (!("socket" in silent) || !("socket" in lively)) throw new Error("refused");
    const dropped = new Promise<number>((resolve) => silent.socket.once("close", (code) => resolve(code)));
    // Terminated without a close frame: the client sees 1006.
    expect(await dropped).toBe(1006);
    await new Promise((resolve) => setTimeout(resolve, 3 * HEARTBEAT_MS));
    expect(lively.socket.readyState).toBe(WebSocket.OPEN);
    lively.socket.close();
  });
});

/** A stream connection opened by hand that then stops reading, as a stuck client does: nothing it is sent is taken off its socket. */
function openStalledStream(endpointId: string, key: string, target: TestServer): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(target.port, "127.0.0.1", () => {
      socket.write(
        `GET /api/v1/events/stream?endpoint=${endpointId} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
          `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${crypto.randomBytes(16).toString("base64")}\r\nX-API-Key: ${key}\r\n\r\n`,
      );
    });
    let head = "";
    const onData = (chunk: Buffer) => {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      socket.off("data", onData);
      if (!head.startsWith("HTTP/1.1 101 ")) return reject(new Error(`refused: ${head.split("\r\n")[0]}`));
      socket.pause();
      resolve(socket);
    };
    socket.on("data", onData);
    socket.once("error", reject);
  });
}

describe("A stream client that stops reading", () => {
  // A server of its own: its flood of events stays out of the other tests, and its heartbeat is the default
  // 30 s, so that the stalled client (which cannot answer pings) is dropped for not reading, not for silence.
  let flooded: TestServer;
  beforeAll(async () => {
    flooded = await startTestServer({ clock });
  });
  afterAll(() => flooded.close());

  it("is dropped once 1 MiB waits for it, while a client that reads keeps its stream", async () => {
    const key = flooded.createAccount("Flooded", { decide: 1000 }).keys.test.secret;
    const endpoint = await createStreamEndpoint(key, ["policy.triggered"], flooded);
    // Twenty shadow policies whose one rule always matches, each with a 4 KB condition: every decide
    // publishes twenty policy.triggered events of about 5 KB, so a few megabytes are sent within seconds.
    const padding = "x".repeat(4_000);
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${flooded.url}/api/v1/policies`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key },
        body: JSON.stringify({ name: `bulky ${i}`, rules: [{ condition: `"${padding}" != ""`, action: "challenge", description: "always" }] }),
      });
      expect(res.status).toBe(201);
    }
    const stalled = await openStalledStream(endpoint.id, key, flooded);
    const reader = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": key }, true, flooded);
    if (!("socket" in reader)) throw new Error("refused");
    const dropped = () => flooded.logs.find((line) => line.includes("event stream client dropped"));
    // The kernel's socket buffers take the first few megabytes; the stream's own buffer fills after them.
    // Events reach the stream through the outbox, which can run behind the decides on a loaded machine: keep
    // deciding (up to 400 decides, some 40 MB of events) and waiting until the client is dropped.
    const deadline = Date.now() + 45_000;
    for (let sent = 0; dropped() === undefined && Date.now() < deadline; ) {
      if (sent < 400) {
        await decide(key, flooded);
        sent++;
      } else {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    const line = dropped();
    expect(line, "the stalled client was never dropped").toBeDefined();
    expect((JSON.parse(line ?? "{}") as { buffered: number }).buffered).toBeGreaterThan(1 << 20);
    // Its connection is closed: once it reads again it finds the end after what it was sent.
    const closed = new Promise<void>((resolve) => stalled.once("close", () => resolve()));
    stalled.on("data", () => undefined);
    stalled.resume();
    await closed;
    // The reading client stays connected and keeps receiving: it gets the next decide's twenty events too.
    await expect.poll(() => reader.messages.length, { timeout: 10_000 }).toBeGreaterThan(20);
    const before = reader.messages.length;
    await decide(key, flooded);
    await flooded.app.settled();
    await expect.poll(() => reader.messages.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(before + 20);
    expect(reader.messages.every((message) => message.type === "policy.triggered")).toBe(true);
    expect(reader.socket.readyState).toBe(WebSocket.OPEN);
    reader.socket.close();
  }, 60_000);

  it("is dropped once 1 MiB of pongs waits for it, instead of making the server hold them all", async () => {
    const key = flooded.createAccount("Pinging").keys.test.secret;
    const endpoint = await createStreamEndpoint(key, [], flooded);
    const stalled = await openStalledStream(endpoint.id, key, flooded);
    const closed = new Promise<void>((resolve) => stalled.once("close", () => resolve()));
    // The heartbeat (30 s here) would drop it for not answering pings too, but much later.
    // A masked ping frame with 125 bytes of payload, as clients must mask: 131 bytes on the wire.
    const mask = crypto.randomBytes(4);
    const ping = Buffer.concat([Buffer.from([0x89, 0x80 | 125]), mask, Buffer.alloc(125)]);
    const burst = Buffer.concat(Array.from({ length: 1_000 }, () => ping));
    const dropped = () => flooded.logs.some((line) => line.includes("event stream client dropped") && line.includes(endpoint.id));
    // Each burst queues 1,000 pongs (127 KB); the kernel's buffers take the first few megabytes.
    const deadline = Date.now() + 30_000;
    while (!dropped() && Date.now() < deadline && !stalled.destroyed) {
      // The server runs in this process: every write gives it the event loop.
      const room = stalled.write(burst);
      await new Promise((resolve) => (room ? setImmediate(resolve) : setTimeout(resolve, 5)));
    }
    expect(dropped(), "the pinging client was never dropped").toBe(true);
    // Once: the pings still in the same read find it dropped already.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(flooded.logs.filter((line) => line.includes("event stream client dropped") && line.includes(endpoint.id))).toHaveLength(1);
    stalled.on("data", () => undefined);
    stalled.on("error", () => undefined);
    stalled.resume();
    await closed;
  }, 45_000);
});

describe("WebSocket delivery", () => {
  it("streams the endpoint's events live, each signed with its own secret, verifiable by the verify operation", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
    const other = await createStreamEndpoint(keys.test.secret, ["case.created"]);
    const opened = await connect(`?endpoint=${endpoint.id}`, { authorization: `Bearer ${keys.test.secret}` });
    const idle = await connect(`?endpoint=${other.id}`, { "x-api-key": keys.test.secret });
    if (!("socket" in opened) || !("socket" in idle)) throw new Error("refused");
    await decide();
    await server.app.settled();
    await expect.poll(() => opened.messages.length).toBe(1);
    const [message] = opened.messages;
    const event = JSON.parse(message?.payload ?? "{}") as WebhookEvent;
    expect(message).toMatchObject({ id: event.id, type: "decision.allow", timestamp: String(Math.floor(clock.now() / 1000)) });
    expect(event).toMatchObject({ type: "decision.allow", environment: "test", data: { userId: "streamed", decision: "allow" } });
    const verify = async (secret: string) => {
      const res = await fetch(`${server.url}/api/v1/webhooks`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
        body: JSON.stringify({ payload: message?.payload, signature: message?.signature, timestamp: message?.timestamp, secret }),
      });
      return ((await res.json()) as { data: { valid: boolean } }).data.valid;
    };
    expect(await verify(endpoint.secret)).toBe(true);
    expect(await verify(other.secret)).toBe(false);
    // The other endpoint subscribes to case.created only: a decide that opens a case reaches it, and since one
    // connection delivers in order, a decision.allow sent to it by mistake would have arrived before.
    const res = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
      body: JSON.stringify({ userId: "streamed_bot", action: "signup", ...botAttack("185.220.101.46") }),
    });
    expect(res.status).toBe(200);
    await server.app.settled();
    await expect.poll(() => idle.messages.length).toBeGreaterThan(0);
    expect(idle.messages.map((m) => m.type)).toEqual(["case.created"]);
    expect(opened.messages.map((m) => m.type)).toEqual(["decision.allow"]);
    opened.socket.close();
    idle.socket.close();
  });

  it("refuses connections without a valid secret key with webhooks:read, or without one of the account's websocket endpoints", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret);
    const query = `?endpoint=${endpoint.id}`;
    const restricted = server.app.keys.issue({ accountId: server.app.keys.find(keys.test.secret)?.accountId ?? "", environment: "test", kind: "secret", permissions: ["cases:read"] }).key;
    const refusals: Array<[string, Record<string, string>, number]> = [
      [query, {}, 401],
      // Keys in the query string are not read: they would end up in access logs.
      [`${query}&key=${keys.test.secret}`, {}, 401],
      [query, { "x-api-key": "sk_test_nope" }, 401],
      [query, { "x-api-key": keys.test.publishable }, 403],
      [query, { "x-api-key": restricted }, 403],
      [query, { "x-api-key": keys.live.secret }, 404],
      ["?endpoint=whe_none", { "x-api-key": keys.test.secret }, 404],
    ];
    for (const [q, headers, status] of refusals) {
      expect(await connect(q, headers), `${q} ${JSON.stringify(headers)}`).toEqual({ refused: status });
    }
  });

  it("reads its query as a REST endpoint's: a 400 naming the parameter for one missing, unknown, repeated, badly encoded or of the wrong kind", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret);
    const refusal = (query: string) =>
      new Promise<{ status: number; body: { error: { code: string; message: string; details: { fieldViolations?: Array<{ field: string; description: string }> } } } }>((resolve, reject) => {
        const socket = new WebSocket(`ws://127.0.0.1:${server.port}/api/v1/events/stream${query}`, { headers: { "x-api-key": keys.test.secret } });
        socket.once("open", () => reject(new Error(`${query} was opened`)));
        socket.once("error", reject);
        socket.once("unexpected-response", (_req, res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => (text += chunk));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as never }));
        });
      });
    for (const [query, message, field] of [
      ["", "the query parameter endpoint is required: pass ?endpoint=whe_... of a websocket endpoint", "endpoint"],
      ["?endpoint=", "the query parameter endpoint is required: pass ?endpoint=whe_... of a websocket endpoint", "endpoint"],
      ["?endpoint=evi_1", "query parameter endpoint must start with whe_", "endpoint"],
      [`?endpoint=${endpoint.id}&endpoint=${endpoint.id}`, "query parameter endpoint is given 2 times; give it once", "endpoint"],
      [`?endpoint=${endpoint.id}&since=1`, "unknown query parameter since", "since"],
      [`?endpoint=${endpoint.id}%ff`, "query parameter endpoint is not valid percent-encoding", "endpoint"],
    ] as const) {
      const { status, body } = await refusal(query);
      expect(status, query).toBe(400);
      expect(body.error, query).toMatchObject({ code: "VALIDATION_ERROR", message });
      expect(body.error.details.fieldViolations?.map((violation) => violation.field), query).toEqual([field]);
    }
    // Percent-encoded, the same id.
    const opened = await connect(`?endpoint=${encodeURIComponent(endpoint.id).replace("_", "%5F")}`, { "x-api-key": keys.test.secret });
    if (!("socket" in opened)) throw new Error(`refused with ${opened.refused}`);
    opened.socket.close();
  });

  it("logs and counts every opening and refusal as a request, as a REST call is", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret);
    const requestLines = () =>
      server.logs
        .map((line) => JSON.parse(line) as { msg: string; route?: string; protocol?: string; status?: number; code?: string; key?: string; requestId?: string; clientIp?: string })
        .filter((line) => line.msg === "request" && line.route === "GET /api/v1/events/stream");
    const before = requestLines().length;
    expect(await connect(`?endpoint=${endpoint.id}`, { "x-api-key": "sk_test_guessed" })).toEqual({ refused: 401 });
    const opened = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": keys.test.secret });
    if (!("socket" in opened)) throw new Error("refused");
    opened.socket.close();
    const lines = requestLines().slice(before);
    expect(lines).toMatchObject([
      { protocol: "websocket", status: 401, code: "UNAUTHORIZED", clientIp: "127.0.0.1" },
      { protocol: "websocket", status: 101, code: "OK", clientIp: "127.0.0.1", key: `…${keys.test.secret.slice(-4)}` },
    ]);
    expect(lines[0]).not.toHaveProperty("key");
    for (const line of lines) expect(line.requestId).toMatch(/^req_/);

    // A handshake ws would refuse is refused, and logged, as what it was answered: not 101.
    const validKey = `Sec-WebSocket-Key: ${crypto.randomBytes(16).toString("base64")}\r\n`;
    const handshake = (extra: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(server.port, "127.0.0.1", () =>
          socket.write(`GET /api/v1/events/stream?endpoint=${endpoint.id} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-API-Key: ${keys.test.secret}\r\n${extra}\r\n`),
        );
        let answer = "";
        socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
        socket.on("close", () => resolve(answer));
        socket.on("error", reject);
      });
    expect(await handshake("Sec-WebSocket-Version: 13\r\n")).toMatch(/^HTTP\/1.1 400 [\s\S]*"code":"VALIDATION_ERROR"[\s\S]*Sec-WebSocket-Key/);
    // A version it does not serve: told the ones it does, so that the client can try one (RFC 6455 4.4).
    const oldVersion = await handshake(`${validKey}Sec-WebSocket-Version: 7\r\n`);
    expect(oldVersion).toMatch(/^HTTP\/1.1 400 /);
    expect(oldVersion).toMatch(/^Sec-WebSocket-Version: 13, 8\r$/m);
    // Past the checks made before ws: a subprotocol header ws cannot parse.
    expect(await handshake(`${validKey}Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: a,,b\r\n`)).toMatch(/^HTTP\/1.1 400 [\s\S]*the WebSocket handshake is invalid/);
    await expect.poll(() => requestLines().slice(before + 2).map((line) => `${line.status} ${line.code}`)).toEqual(["400 VALIDATION_ERROR", "400 VALIDATION_ERROR", "400 VALIDATION_ERROR"]);
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).toMatch(/fraud_requests_total\{route="GET \/api\/v1\/events\/stream",protocol="websocket",outcome="client_error",code="UNAUTHORIZED"\} [1-9]/);
    expect(metrics).toMatch(/fraud_requests_total\{route="GET \/api\/v1\/events\/stream",protocol="websocket",outcome="success",code="OK"\} [1-9]/);
  });

  it("answers a refused opening as REST answers a refused call: request id, error code header and envelope", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret);
    const open = (headers: string) =>
      new Promise<{ head: string; body: Record<string, unknown> }>((resolve, reject) => {
        const socket = net.connect(server.port, "127.0.0.1", () =>
          socket.write(
            `GET /api/v1/events/stream?endpoint=${endpoint.id} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
              `Sec-WebSocket-Key: ${crypto.randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n${headers}\r\n`,
          ),
        );
        let answer = "";
        socket.on("data", (chunk: Buffer) => (answer += chunk.toString("utf8")));
        socket.on("close", () => {
          const [head = "", body = ""] = answer.split("\r\n\r\n");
          resolve({ head, body: JSON.parse(body) as Record<string, unknown> });
        });
        socket.on("error", reject);
      });
    const rest = async (headers: Record<string, string>) => (await fetch(`${server.url}/api/v1/webhooks`, { headers })).json() as Promise<{ error: { code: string; message: string } }>;
    for (const [header, fetchHeaders] of [
      ["X-API-Key: sk_test_guessed\r\n", { "x-api-key": "sk_test_guessed" }],
      ["", {}],
      [`X-API-Key: ${keys.test.publishable}\r\n`, { "x-api-key": keys.test.publishable }],
    ] as const) {
      const { head, body } = await open(header);
      const requestId = /^X-Request-Id: (req_\w+)\r?$/im.exec(head)?.[1];
      expect(requestId, head).toBeDefined();
      expect(body).toMatchObject({ success: false, meta: { requestId } });
      const code = (body.error as { code: string }).code;
      expect(head).toMatch(new RegExp(`^fraud-error-code: ${code}\r?$`, "im"));
      expect(head).toMatch(/^Cache-Control: no-store\r?$/im);
      // The same refusal, in the same words, as a REST call with that key gets (the operation named apart).
      const restError = (await rest(fetchHeaders)).error;
      expect(code).toBe(restError.code);
      expect((body.error as { message: string }).message).toBe(restError.message.replace("ListWebhooks", "the event stream"));
    }
  });

  it("answers an upgrade request whose target is no URL path, and keeps serving", async () => {
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(new URL(server.url).port), "127.0.0.1", () => {
        socket.write("GET // HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
      });
      let text = "";
      socket.on("data", (chunk: Buffer) => {
        text += chunk.toString("latin1");
        if (text.includes("\r\n\r\n")) socket.destroy();
      });
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
    });
    expect(reply).toMatch(/^HTTP\/1\.1 [45]\d\d /);
    expect((await fetch(`${server.url}/api/v1/status?public=true`)).status).toBe(200);
  });

  it("still serves plain HTTP/1.1 to requests that ask for another upgrade (curl --http2 asks for h2c)", async () => {
    const status = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${server.url}/api/v1/status?public=true`, { headers: { connection: "Upgrade, HTTP2-Settings", upgrade: "h2c", "http2-settings": "AAMAAABkAARAAAAAAAIAAAAA" } }, (res) => {
        let body = "";
        res.on("data", (chunk: Buffer) => (body += chunk.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on("error", reject);
      req.end();
    });
    expect(status.status).toBe(200);
    expect(JSON.parse(status.body)).toMatchObject({ success: true, data: { status: "operational" } });
  });
});
