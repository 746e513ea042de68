// WebSocket delivery with a real `ws` client, on the same port as everything else.
import http from "node:http";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { StreamMessage } from "../../src/webhooks/stream.js";
import type { WebhookEvent } from "../../src/webhooks/events.js";
import { ManualClock } from "../helpers/clock.js";
import { UK_IP, HUMAN_DESKTOP } from "../helpers/inputs.js";
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

async function createStreamEndpoint(key: string, events: string[] = []): Promise<{ id: string; secret: string }> {
  const res = await fetch(`${server.url}/api/v1/webhooks/endpoints`, {
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
function connect(query: string, headers: Record<string, string>, autoPong = true): Promise<{ socket: WebSocket; messages: StreamMessage[] } | { refused: number }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://127.0.0.1:${server.port}/api/v1/events/stream${query}`, { headers, autoPong });
    const messages: StreamMessage[] = [];
    socket.on("message", (data) => messages.push(JSON.parse(String(data)) as StreamMessage));
    socket.once("open", () => resolve({ socket, messages }));
    socket.once("unexpected-response", (_req, res) => resolve({ refused: res.statusCode ?? 0 }));
    socket.once("error", reject);
  });
}

async function decide(): Promise<void> {
  const res = await fetch(`${server.url}/api/v1/decide`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
    body: JSON.stringify({ userId: "streamed", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }),
  });
  expect(res.status).toBe(200);
}

describe("WebSocket connections that should end", () => {
  it("closes the stream of a key revoked since it connected, before sending it anything more", async () => {
    const endpoint = await createStreamEndpoint(keys.test.secret, ["decision.allow"]);
    const reader = server.app.keys.issue({ accountId, environment: "test", kind: "secret", permissions: ["webhooks:read"], name: "stream reader" }).key;
    const opened = await connect(`?endpoint=${endpoint.id}`, { "x-api-key": reader });
    if (!("socket" in opened)) throw new Error("refused");
    const closed = new Promise<number>((resolve) => opened.socket.once("close", (code) => resolve(code)));
    server.app.keys.revoke(reader);
    clock.advance(1_000);
    await decide();
    await server.app.settled();
    expect(await closed).toBe(1008);
    expect(opened.messages).toEqual([]);
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
    // The other endpoint subscribes to case.created only.
    expect(idle.messages).toEqual([]);
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
      ["", { "x-api-key": keys.test.secret }, 404],
    ];
    for (const [q, headers, status] of refusals) {
      expect(await connect(q, headers), `${q} ${JSON.stringify(headers)}`).toEqual({ refused: status });
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
