// Webhook endpoints through the API and HTTP delivery to a real receiver on
// 127.0.0.1, with the retry schedule played on a manual clock.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { ATTEMPT_TIMEOUT_MS, RETRY_DELAYS_MS } from "../../src/webhooks/delivery-policy.js";
import type { WebhookEvent } from "../../src/webhooks/events.js";
import { ManualClock } from "../helpers/clock.js";
import { HUMAN_DESKTOP, UK_IP, botAttack } from "../helpers/inputs.js";
import { startReceiver, type Receiver } from "../helpers/receiver.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { MAX_WEBHOOK_ENDPOINTS } from "../../src/webhooks/endpoints.js";

const clock = new ManualClock();
let server: TestServer;
let receiver: Receiver;

interface Json {
  success: boolean;
  data: Record<string, unknown> & { webhook?: Endpoint; secret?: string };
  error?: { code: string; message: string; details: { fieldViolations?: Array<{ field: string }> } };
}
interface Endpoint { id: string; url: string; events: string[]; deliveryMethod: string; status: string; description: string; secretLast4: string }
interface DeadLetterJson { id: string; kind: string; attempts: number; lastError: string; payload: { endpointId: string; eventId: string; body: string } }

async function api(key: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { "content-type": "application/json", "x-api-key": key },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: (text ? JSON.parse(text) : {}) as Json };
}

async function createEndpoint(key: string, body: Record<string, unknown>): Promise<{ endpoint: Endpoint; secret: string }> {
  const { status, json } = await api(key, "POST", "/api/v1/webhooks/endpoints", body);
  expect(status, JSON.stringify(json)).toBe(201);
  return { endpoint: json.data.webhook as Endpoint, secret: json.data.secret as string };
}

async function decide(key: string, risky: boolean): Promise<void> {
  const body = risky
    ? { userId: "fraudster", action: "checkout", amount: 900, currency: "USD", ...botAttack("185.220.101.45") }
    : { userId: "regular", action: "login", ip: UK_IP, ...HUMAN_DESKTOP };
  const { status } = await api(key, "POST", "/api/v1/decide", body);
  expect(status).toBe(200);
}

/** Runs whatever the outbox has due at the manual clock's time. */
const drain = () => server.app.settled();

beforeAll(async () => {
  server = await startTestServer({ clock, env: { FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" } });
  // The tests drive the queue by hand (drain after moving the clock): the
  // background runner's poll could otherwise pick up a task drain() is running.
  await server.app.outbox.stop();
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  await server.close();
});

describe("webhook endpoints", () => {
  it("creates an endpoint with a whsec_ secret shown once; list and get show only its last four characters", async () => {
    const { keys } = server.createAccount();
    const { endpoint, secret } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.deny"], description: "fraud team" });
    expect(secret).toMatch(/^whsec_[0-9A-Za-z]{32}$/);
    expect(endpoint).toMatchObject({ url: receiver.url, events: ["decision.deny"], deliveryMethod: "http", status: "enabled", description: "fraud team", secretLast4: secret.slice(-4) });
    expect(endpoint.id).toMatch(/^whe_/);

    const list = await api(keys.test.secret, "GET", "/api/v1/webhooks");
    expect(list.status).toBe(200);
    expect(list.json.data.webhooks).toEqual([endpoint]);
    const one = await api(keys.test.secret, "GET", `/api/v1/webhooks/endpoints/${endpoint.id}`);
    expect(one.json.data).toEqual(endpoint);
    expect(JSON.stringify([list.json, one.json])).not.toContain(secret);
    expect(server.logs.join("\n")).not.toContain(secret);

    // Other environments and accounts see nothing.
    expect((await api(keys.live.secret, "GET", `/api/v1/webhooks/endpoints/${endpoint.id}`)).status).toBe(404);
    expect((await api(keys.live.secret, "GET", "/api/v1/webhooks")).json.data.webhooks).toEqual([]);
    expect((await api(server.createAccount().keys.test.secret, "DELETE", `/api/v1/webhooks/endpoints/${endpoint.id}`)).status).toBe(404);
  });

  it("updates only the fields sent, subscribes to all events with allEvents, rotates the secret and deletes", async () => {
    const { keys } = server.createAccount();
    const { endpoint, secret } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["case.created"] });
    const path = `/api/v1/webhooks/endpoints/${endpoint.id}`;
    const described = await api(keys.test.secret, "PATCH", path, { description: "renamed" });
    expect(described.json.data).toMatchObject({ description: "renamed", events: ["case.created"], url: receiver.url, status: "enabled" });
    const everything = await api(keys.test.secret, "PATCH", path, { allEvents: true, status: "disabled" });
    expect(everything.json.data).toMatchObject({ events: [], status: "disabled", description: "renamed" });
    const both = await api(keys.test.secret, "PATCH", path, { allEvents: true, events: ["case.created"] });
    expect(both.status).toBe(400);
    expect((await api(keys.test.secret, "PATCH", path, { events: ["case.exploded"] })).status).toBe(400);
    // An empty status or event type is a mistake to name, not a value to store (it was a 500 and a CHECK failure).
    expect((await api(keys.test.secret, "PATCH", path, { status: "" })).status).toBe(400);
    expect((await api(keys.test.secret, "PATCH", path, { events: [""] })).status).toBe(400);
    // An empty list cannot be told from none: it would change nothing while the caller meant every event.
    await api(keys.test.secret, "PATCH", path, { events: ["case.created"] });
    const emptied = await api(keys.test.secret, "PATCH", path, { events: [], description: "not applied" });
    expect(emptied.status).toBe(400);
    expect(emptied.json.error?.details).toEqual({
      fieldViolations: [{ field: "events", description: "must not be an empty list in an update, where it cannot be told from a list left out and would change nothing" }],
    });
    expect((await api(keys.test.secret, "GET", path)).json.data).toMatchObject({ events: ["case.created"], description: "renamed" });

    const rotated = await api(keys.test.secret, "POST", `${path}/rotate-secret`, {});
    expect(rotated.status).toBe(200);
    const newSecret = rotated.json.data.secret as string;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(secret);
    expect(rotated.json.data.webhook?.secretLast4).toBe(newSecret.slice(-4));

    const deleted = await fetch(`${server.url}${path}`, { method: "DELETE", headers: { "x-api-key": keys.test.secret } });
    expect(deleted.status).toBe(204);
    expect((await api(keys.test.secret, "GET", path)).status).toBe(404);
    expect((await api(keys.test.secret, "PATCH", path, { description: "gone" })).status).toBe(404);
    expect((await api(keys.test.secret, "POST", `${path}/rotate-secret`, {})).status).toBe(404);
  });

  it("refuses URLs the SSRF guard refuses, a websocket endpoint with a URL and an http endpoint without one", async () => {
    const { keys } = server.createAccount();
    for (const body of [{ url: "http://0.0.0.0/hook" }, { url: "http://[ff02::1]/hook" }, { url: "ftp://example.com/x" }, { url: "http://user:pw@127.0.0.1/" }, { deliveryMethod: "websocket", url: receiver.url }, {}]) {
      const { status, json } = await api(keys.test.secret, "POST", "/api/v1/webhooks/endpoints", body);
      expect(status, JSON.stringify(body)).toBe(400);
      expect(json.error?.details.fieldViolations?.[0]?.field).toBe("url");
    }
  });

  it("holds at most 20 endpoints per account and environment: the 21st is refused with 409, storing nothing", async () => {
    const { keys } = server.createAccount();
    const created = await Promise.all(Array.from({ length: MAX_WEBHOOK_ENDPOINTS }, (_, i) => api(keys.test.secret, "POST", "/api/v1/webhooks/endpoints", { url: `${receiver.url}/h${i}` })));
    expect(created.map((answer) => answer.status)).toEqual(Array.from({ length: MAX_WEBHOOK_ENDPOINTS }, () => 201));
    const refused = await api(keys.test.secret, "POST", "/api/v1/webhooks/endpoints", { url: `${receiver.url}/one-more` });
    expect(refused.status).toBe(409);
    expect(refused.json.error).toMatchObject({ code: "CONFLICT", message: "this account and environment already hold 20 webhook endpoints, the most allowed; delete one first" });
    expect(((await api(keys.test.secret, "GET", "/api/v1/webhooks")).json.data.webhooks as Endpoint[]).length).toBe(MAX_WEBHOOK_ENDPOINTS);
    // The other environment holds its own; one deleted makes room.
    expect((await api(keys.live.secret, "POST", "/api/v1/webhooks/endpoints", { url: `${receiver.url}/live` })).status).toBe(201);
    const first = created[0]?.json.data.webhook as Endpoint;
    expect((await api(keys.test.secret, "DELETE", `/api/v1/webhooks/endpoints/${first.id}`)).status).toBe(204);
    expect((await api(keys.test.secret, "POST", "/api/v1/webhooks/endpoints", { url: `${receiver.url}/one-more` })).status).toBe(201);
  });

  it("refuses private and loopback destinations unless FRAUD_WEBHOOK_ALLOW_PRIVATE=true", async () => {
    expect(loadConfig({}).webhookAllowPrivate).toBe(false);
    expect(loadConfig({ FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" }).webhookAllowPrivate).toBe(true);
    const strict = await startTestServer();
    try {
      const { keys } = strict.createAccount();
      for (const url of [receiver.url, "http://localhost:9/x", "http://10.1.2.3/x", "http://169.254.169.254/latest/meta-data"]) {
        const res = await fetch(`${strict.url}/api/v1/webhooks/endpoints`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
          body: JSON.stringify({ url }),
        });
        expect(res.status, url).toBe(400);
        expect(((await res.json()) as Json).error?.message).toMatch(/FRAUD_WEBHOOK_ALLOW_PRIVATE|never a webhook destination/);
      }
    } finally {
      await strict.close();
    }
  });
});

describe("changing an endpoint's URL", () => {
  it("refuses a private or link-local URL with 400 on PATCH, and keeps the stored URL", async () => {
    const strict = await startTestServer();
    try {
      const { keys } = strict.createAccount();
      const send = async (method: string, path: string, body?: unknown) => {
        const res = await fetch(`${strict.url}${path}`, {
          method,
          headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        return { status: res.status, json: (await res.json()) as Json };
      };
      const publicUrl = "https://93.184.216.34/hook";
      const created = await send("POST", "/api/v1/webhooks/endpoints", { url: publicUrl });
      expect(created.status, JSON.stringify(created.json)).toBe(201);
      const path = `/api/v1/webhooks/endpoints/${(created.json.data.webhook as Endpoint).id}`;
      for (const url of ["http://169.254.169.254/", "https://169.254.169.254/latest/meta-data", "https://10.0.0.1/"]) {
        const { status, json } = await send("PATCH", path, { url });
        expect(status, url).toBe(400);
        expect(json.error?.code).toBe("VALIDATION_ERROR");
        expect(json.error?.details.fieldViolations?.map((v) => v.field)).toEqual(["url"]);
      }
      expect((await send("PATCH", path, { url: "https://10.0.0.1/" })).json.error?.message).toMatch(/10\.0\.0\.1 is a private .*FRAUD_WEBHOOK_ALLOW_PRIVATE/);
      expect((await send("PATCH", path, { url: "https://169.254.169.254/" })).json.error?.message).toMatch(/link-local/);
      expect(((await send("GET", path)).json.data as unknown as Endpoint).url).toBe(publicUrl);
      const stored = strict.app.db.prepare("SELECT url FROM webhook_endpoints").all();
      expect(stored).toEqual([{ url: publicUrl }]);
      // A public URL is still taken.
      const moved = await send("PATCH", path, { url: "https://93.184.216.35/hook" });
      expect(moved.status).toBe(200);
      expect((moved.json.data as unknown as Endpoint).url).toBe("https://93.184.216.35/hook");
    } finally {
      await strict.close();
    }
  });
});

describe("HTTP delivery", () => {
  it("POSTs each event, signed, to every endpoint subscribed to its type; the verify operation accepts the signature", async () => {
    const { keys } = server.createAccount();
    const all = await createEndpoint(keys.test.secret, { url: `${receiver.url}/all` });
    const cases = await createEndpoint(keys.test.secret, { url: `${receiver.url}/cases`, events: ["case.created"] });
    receiver.requests.length = 0;
    await decide(keys.test.secret, true);
    await drain();

    const seen = receiver.requests.map((r) => `${r.path} ${String(r.headers["fraud-event-type"])}`).sort();
    expect(seen).toEqual(["/hooks/all case.created", "/hooks/all decision.deny", "/hooks/cases case.created"]);
    for (const request of receiver.requests) {
      const secret = request.path.endsWith("/all") ? all.secret : cases.secret;
      const event = JSON.parse(request.body) as WebhookEvent;
      expect(request.method).toBe("POST");
      expect(request.headers["content-type"]).toBe("application/json");
      expect(request.headers["fraud-event-id"]).toBe(event.id);
      expect(request.headers["fraud-event-type"]).toBe(event.type);
      expect(request.headers["fraud-timestamp"]).toBe(String(Math.floor(clock.now() / 1000)));
      expect(request.headers["fraud-signature"]).toMatch(/^sha256=[0-9a-f]{64}$/);
      expect(event).toMatchObject({ environment: "test", createdAt: new Date(clock.now()).toISOString() });
      const check = {
        payload: request.body,
        signature: String(request.headers["fraud-signature"]),
        timestamp: String(request.headers["fraud-timestamp"]),
        secret,
      };
      const verified = await api(keys.test.secret, "POST", "/api/v1/webhooks", check);
      expect(verified.json).toMatchObject({ success: true, data: { valid: true, reason: "valid" } });
      const tampered = await api(keys.test.secret, "POST", "/api/v1/webhooks", { ...check, payload: request.body.replace("test", "live") });
      expect(tampered.json.data).toEqual({ valid: false, reason: "signature_mismatch" });
    }
    const deny = JSON.parse(receiver.requests.find((r) => r.headers["fraud-event-type"] === "decision.deny")?.body ?? "{}") as WebhookEvent<"decision.deny">;
    expect(deny.data).toMatchObject({ decision: "deny", userId: "fraudster", shadowResults: [] });
    // The built-in thresholds denied it: the decision event names the policy whose rule set it (docs/webhooks.md).
    expect(deny.data.policyId).toBe("pol_default_thresholds");
    expect(deny.data.reasons.length).toBeGreaterThan(0);
  });

  it("fans an event out in the transaction that finishes it: a fan-out that fails leaves no delivery, and its retry delivers once", async () => {
    const { keys, account } = server.createAccount();
    await createEndpoint(keys.test.secret, { url: `${receiver.url}/once`, events: ["decision.allow"] });
    let failNext = true;
    // Runs after the HTTP fan-out: its failure stands for a crash after the fan-out, before the event's task is done.
    server.app.events.addSink({
      wants: (tenant) => tenant.accountId === account.id,
      deliver: (tenant) => {
        if (tenant.accountId === account.id && failNext) {
          failNext = false;
          throw new Error("the process died here");
        }
      },
    });
    receiver.requests.length = 0;
    await decide(keys.test.secret, false);
    await drain();
    const deliveries = () => (server.app.db.prepare("SELECT COUNT(*) AS n FROM outbox WHERE kind = 'webhook.delivery' AND account_id = ?").get(account.id) as { n: number }).n;
    const events = () => (server.app.db.prepare("SELECT COUNT(*) AS n FROM outbox WHERE kind = 'event' AND account_id = ?").get(account.id) as { n: number }).n;
    // The event is still to do, and nothing of its fan-out stayed.
    expect(events()).toBe(1);
    expect(deliveries()).toBe(0);
    expect(receiver.requests).toEqual([]);
    clock.advance(1_000);
    await drain();
    expect(events()).toBe(0);
    expect(receiver.requests.map((r) => r.path)).toEqual(["/hooks/once"]);
  });

  it("retries on the documented schedule, stretched by Retry-After, and dead-letters after the ninth attempt; a replay delivers", async () => {
    const { keys } = server.createAccount();
    await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    receiver.replies.push({ status: 503, headers: { "retry-after": "600" } }, ...Array.from({ length: 8 }, () => ({ status: 500 })));
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests).toHaveLength(1);

    // Retry-After: 600 outweighs the scheduled 10 s (plus up to 10 % jitter).
    clock.advance(11_000);
    await drain();
    expect(receiver.requests).toHaveLength(1);
    clock.advance(600_000 - 11_000);
    await drain();
    expect(receiver.requests).toHaveLength(2);

    // Attempts 3 to 9: not before the scheduled wait, and by the wait plus its jitter.
    for (const [index, wait] of RETRY_DELAYS_MS.slice(1).entries()) {
      clock.advance(wait - 1);
      await drain();
      expect(receiver.requests, `attempt ${index + 3} came early`).toHaveLength(index + 2);
      clock.advance(Math.ceil(wait * 0.1) + 1);
      await drain();
      expect(receiver.requests, `attempt ${index + 3} missing`).toHaveLength(index + 3);
    }
    // Every attempt carries the identical event; only the timestamp moves.
    expect(new Set(receiver.requests.map((r) => r.body)).size).toBe(1);
    expect(new Set(receiver.requests.map((r) => r.headers["fraud-event-id"])).size).toBe(1);
    expect(new Set(receiver.requests.map((r) => r.headers["fraud-timestamp"])).size).toBe(9);

    clock.advance(48 * 3600_000);
    await drain();
    expect(receiver.requests).toHaveLength(9);
    const dead = await api(keys.test.secret, "GET", "/api/v1/dead-letters");
    expect(dead.status).toBe(200);
    const letters = dead.json.data.deadLetters as DeadLetterJson[];
    expect(letters).toHaveLength(1);
    const [letter] = letters;
    expect(letter).toMatchObject({ kind: "webhook.delivery", attempts: 9, lastError: "attempts_exhausted: HTTP 500 on attempt 9" });
    expect(letter?.id).toMatch(/^dlq_\d+$/);
    expect(letter?.payload.eventId).toBe(receiver.requests[0]?.headers["fraud-event-id"]);
    expect(dead.json.data.count).toBe(1);

    expect((await api(server.createAccount().keys.test.secret, "POST", `/api/v1/dead-letters/${letter?.id}/replay`, {})).status).toBe(404);
    const replayed = await api(keys.test.secret, "POST", `/api/v1/dead-letters/${letter?.id}/replay`, {});
    expect(replayed.json).toMatchObject({ success: true, data: { id: letter?.id } });
    await drain();
    expect(receiver.requests).toHaveLength(10);
    expect(receiver.requests[9]?.body).toBe(receiver.requests[0]?.body);
    expect((await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.count).toBe(0);
    expect((await api(keys.test.secret, "POST", `/api/v1/dead-letters/${letter?.id}/replay`, {})).status).toBe(404);
  });

  it("disables an endpoint that answers 410 and dead-letters the delivery; re-enabled and replayed, it is delivered", async () => {
    const { keys } = server.createAccount();
    const { endpoint } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    receiver.replies.push({ status: 410 });
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests).toHaveLength(1);
    const path = `/api/v1/webhooks/endpoints/${endpoint.id}`;
    expect((await api(keys.test.secret, "GET", path)).json.data.status).toBe("disabled");
    const [letter] = (await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.deadLetters as DeadLetterJson[];
    expect(letter?.lastError).toMatch(/410/);

    // Disabled: later events are not delivered.
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests).toHaveLength(1);

    await api(keys.test.secret, "PATCH", path, { status: "enabled" });
    await api(keys.test.secret, "POST", `/api/v1/dead-letters/${letter?.id}/replay`, {});
    await drain();
    expect(receiver.requests).toHaveLength(2);
    expect(receiver.requests[1]?.body).toBe(receiver.requests[0]?.body);
  });

  it("disables an endpoint once, and audits it once, when several deliveries get their 410 together", async () => {
    const { keys } = server.createAccount();
    const { endpoint } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    receiver.replies.push({ status: 410 }, { status: 410 }, { status: 410 });
    await Promise.all([decide(keys.test.secret, false), decide(keys.test.secret, false), decide(keys.test.secret, false)]);
    await drain();
    expect(receiver.requests.length).toBeGreaterThan(1);
    const audit = await api(keys.test.secret, "GET", "/api/v1/audit-logs?action=webhook.disabled");
    const entries = audit.json.data.entries as Array<{ subject: string; actor: string }>;
    expect(entries).toEqual([expect.objectContaining({ subject: endpoint.id, actor: "system" })]);
  });

  it("does not disable an endpoint moved to another URL while a delivery to its old one was getting its 410: the delivery goes to the new URL", async () => {
    const { keys } = server.createAccount();
    const { endpoint } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    const path = `/api/v1/webhooks/endpoints/${endpoint.id}`;
    receiver.requests.length = 0;
    // The old receiver is being retired: it answers 410, and meanwhile the endpoint is pointed at its successor.
    receiver.replies.push({ status: 410, beforeReplying: () => api(keys.test.secret, "PATCH", path, { url: `${receiver.url}/new` }) });
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests.map((r) => r.path)).toEqual(["/hooks", "/hooks/new"]);
    expect(receiver.requests[1]?.body).toBe(receiver.requests[0]?.body);
    expect((await api(keys.test.secret, "GET", path)).json.data).toMatchObject({ url: `${receiver.url}/new`, status: "enabled" });
    expect((await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.count).toBe(0);
    expect((await api(keys.test.secret, "GET", "/api/v1/audit-logs?action=webhook.disabled")).json.data.entries).toEqual([]);
  });

  it("does not disable an endpoint whose secret was rotated, or that was disabled and re-enabled, while a delivery was getting its 410, even within the same millisecond", async () => {
    const { keys } = server.createAccount();
    const { endpoint } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    const path = `/api/v1/webhooks/endpoints/${endpoint.id}`;
    receiver.requests.length = 0;
    // The manual clock stands still: the changes come in the millisecond the endpoint was read in.
    receiver.replies.push(
      { status: 410, beforeReplying: () => api(keys.test.secret, "POST", `${path}/rotate-secret`, {}) },
      {
        status: 410,
        beforeReplying: async () => {
          await api(keys.test.secret, "PATCH", path, { status: "disabled" });
          await api(keys.test.secret, "PATCH", path, { status: "enabled" });
        },
      },
    );
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests).toHaveLength(3);
    expect((await api(keys.test.secret, "GET", path)).json.data.status).toBe("enabled");
    expect((await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.count).toBe(0);
    expect((await api(keys.test.secret, "GET", "/api/v1/audit-logs?action=webhook.disabled")).json.data.entries).toEqual([]);
  });

  it("dead-letters at once an answer that will never change (400), and signs retries with a rotated secret", async () => {
    const { keys } = server.createAccount();
    const { endpoint, secret } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    receiver.replies.push({ status: 400 }, { status: 500 });
    await decide(keys.test.secret, false);
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests).toHaveLength(2);
    const letters = (await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.deadLetters as DeadLetterJson[];
    expect(letters.map((l) => l.lastError)).toEqual(["rejected: HTTP 400"]);

    const rotated = await api(keys.test.secret, "POST", `/api/v1/webhooks/endpoints/${endpoint.id}/rotate-secret`, {});
    const newSecret = rotated.json.data.secret as string;
    clock.advance(RETRY_DELAYS_MS[0] as number * 1.1);
    await drain();
    expect(receiver.requests).toHaveLength(3);
    const retry = receiver.requests[2];
    const check = { payload: retry?.body, signature: String(retry?.headers["fraud-signature"]), timestamp: String(retry?.headers["fraud-timestamp"]) };
    expect((await api(keys.test.secret, "POST", "/api/v1/webhooks", { ...check, secret: newSecret })).json.data.valid).toBe(true);
    expect((await api(keys.test.secret, "POST", "/api/v1/webhooks", { ...check, secret })).json.data.reason).toBe("signature_mismatch");
  });

  it("dead-letters a task whose stored payload is not JSON, and lists it, instead of stopping the runner", async () => {
    const { account, keys } = server.createAccount();
    server.app.db
      .prepare("INSERT INTO outbox (kind, account_id, environment, payload, status, next_attempt_at, created_at, updated_at) VALUES ('event', ?, 'test', 'not json', 'pending', 0, 0, 0)")
      .run(account.id);
    await drain();
    const letters = (await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.deadLetters as Array<DeadLetterJson & { payload: { unparsed?: string } }>;
    expect(letters.map((l) => ({ kind: l.kind, lastError: l.lastError, payload: l.payload }))).toEqual([
      { kind: "event", lastError: "the event task's payload is not JSON", payload: { unparsed: "not json" } },
    ]);
    // The runner carries on with other work: the account's next event is delivered.
    await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests.map((request) => (JSON.parse(request.body) as WebhookEvent).type)).toEqual(["decision.allow"]);
    expect((JSON.parse(receiver.requests[0]?.body ?? "{}") as WebhookEvent).accountId).toBe(account.id);
  });

  it("gives up an attempt after 10 seconds without an answer and retries it", async () => {
    // A receiver that accepts the request and never answers.
    const silent = http.createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const { keys } = server.createAccount();
      await createEndpoint(keys.test.secret, { url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}/`, events: ["decision.allow"] });
      await decide(keys.test.secret, false);
      const started = performance.now();
      await drain();
      expect(performance.now() - started).toBeGreaterThanOrEqual(ATTEMPT_TIMEOUT_MS - 50);
      const pending = server.app.db.prepare("SELECT attempts, last_error FROM outbox WHERE kind = 'webhook.delivery' AND account_id = ?").get(server.app.keys.find(keys.test.secret)?.accountId) as { attempts: number; last_error: string };
      expect(pending).toEqual({ attempts: 1, last_error: "timeout" });
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  }, 20_000);

  it("drops a delivery whose endpoint was deleted while it was getting its 410, instead of dead-lettering it as disabled", async () => {
    const { keys } = server.createAccount();
    const { endpoint } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    receiver.replies.push({ status: 410, beforeReplying: () => api(keys.test.secret, "DELETE", `/api/v1/webhooks/endpoints/${endpoint.id}`) });
    await decide(keys.test.secret, false);
    await drain();
    expect(receiver.requests).toHaveLength(1);
    expect((await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.count).toBe(0);
  });

  it("drops the deliveries of a deleted endpoint", async () => {
    const { keys } = server.createAccount();
    const { endpoint } = await createEndpoint(keys.test.secret, { url: receiver.url, events: ["decision.allow"] });
    receiver.requests.length = 0;
    receiver.replies.push({ status: 500 });
    await decide(keys.test.secret, false);
    await drain();
    await fetch(`${server.url}/api/v1/webhooks/endpoints/${endpoint.id}`, { method: "DELETE", headers: { "x-api-key": keys.test.secret } });
    clock.advance(60_000);
    await drain();
    expect(receiver.requests).toHaveLength(1);
    expect((await api(keys.test.secret, "GET", "/api/v1/dead-letters")).json.data.count).toBe(0);
  });
});

describe("webhook deliveries at shutdown", () => {
  it("delivers, within the grace period, what the decisions answered just before fan out into", async () => {
    const stopping = await startTestServer({ env: { FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" } });
    const own = await startReceiver();
    try {
      // The background runner is held, so that the shutdown's flush has all of it to do: the decision's event
      // task, then the delivery it fans out into, due after the flush began.
      await stopping.app.outbox.stop();
      const { keys } = stopping.createAccount();
      const created = await fetch(`${stopping.url}/api/v1/webhooks/endpoints`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
        body: JSON.stringify({ url: own.url, events: ["decision.allow"] }),
      });
      expect(created.status).toBe(201);
      const decided = await fetch(`${stopping.url}/api/v1/decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
        body: JSON.stringify({ userId: "leaving", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }),
      });
      expect(((await decided.json()) as { data: { decision: string } }).data.decision).toBe("allow");
      expect(own.requests).toEqual([]);
    } finally {
      await stopping.close();
      await own.close();
    }
    expect(own.requests.map((request) => (JSON.parse(request.body) as { type: string }).type)).toEqual(["decision.allow"]);
  });
});
