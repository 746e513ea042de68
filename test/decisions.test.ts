import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { DecisionService, DecideRequestSchema, DecideResponseSchema, GetDecisionRequestSchema, GetDecisionResponseSchema } from "../gen/fraud/v1/decision_pb.js";
import { REASON_CODES } from "../src/engine/index.js";
import { IDEMPOTENCY_TTL_MS } from "../src/store/idempotency.js";
import { ManualClock } from "./helpers/clock.js";
import { grpcClient, grpcUnary } from "./helpers/grpc.js";
import { HUMAN_DESKTOP, UK_IP, USER_AGENTS, botAttack } from "./helpers/inputs.js";
import { startTestServer, tempDir, type TestServer } from "./helpers/server.js";

const TOR_EXIT = "185.220.101.45";
/** An AWS us-east-1 address: in the datacenter ranges the server is given, and US per the geolocation database. */
const DATACENTER_IP = "3.85.10.10";
/** A German address outside them. */
const DE_IP = "88.198.7.7";
let server: TestServer;
let acme: ReturnType<TestServer["createAccount"]>;
let globex: ReturnType<TestServer["createAccount"]>;
let torDir: string;

beforeAll(async () => {
  torDir = tempDir("tor-");
  // A real Tor bulk exit list: one address per line.
  fs.writeFileSync(path.join(torDir, "exits.txt"), `# Tor bulk exit list\n${TOR_EXIT}\n185.220.101.46\n2a0b:f4c2::1\n`);
  fs.writeFileSync(path.join(torDir, "datacenters.txt"), "# AWS us-east-1\n3.80.0.0/12\n");
  server = await startTestServer({
    config: { torExitListPath: path.join(torDir, "exits.txt"), datacenterRangesPath: path.join(torDir, "datacenters.txt"), engineThreads: 2 },
  });
  acme = server.createAccount("Acme");
  globex = server.createAccount("Globex");
});
afterAll(async () => {
  await server.close();
  fs.rmSync(torDir, { recursive: true, force: true });
});

interface DecideBody {
  success: boolean;
  data: { decision: string; score: number; confidence: number; confidencePercent: number; reasons: string[]; evidenceId: string; requestId: string; processingTimeMs: number };
  meta: { requestId: string; latencyMs: number };
}

async function decide(key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}/api/v1/decide`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key, ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as DecideBody };
}

describe("POST /api/v1/decide", () => {
  it("answers exactly part 2.2 inside the envelope", async () => {
    const { status, body } = await decide(acme.keys.test.secret, { userId: "user_1", action: "login", ip: UK_IP, email: "jane.doe@example.co.uk", ...HUMAN_DESKTOP });
    expect(status).toBe(200);
    expect(Object.keys(body).sort()).toEqual(["data", "meta", "success"]);
    expect(Object.keys(body.data).sort()).toEqual(["confidence", "confidencePercent", "decision", "evidenceId", "processingTimeMs", "reasons", "requestId", "score"]);
    expect(body.data).toMatchObject({ decision: "allow", reasons: ["LOW_RISK"] });
    expect(body.data.score).toBeLessThan(30);
    expect(body.data.confidence).toBeGreaterThan(0);
    expect(body.data.confidence).toBeLessThanOrEqual(1);
    expect(body.data.confidencePercent).toBe(Math.round(body.data.confidence * 100));
    expect(body.data.evidenceId).toMatch(/^evi_[0-9A-Za-z]{22}$/);
    expect(body.data.requestId).toMatch(/^req_[0-9A-Za-z]{22}$/);
    expect(body.data.requestId).toBe(body.meta.requestId);
    expect(typeof body.data.processingTimeMs).toBe("number");
  });

  it("denies the strongest signals together with a score of 80 and above", async () => {
    const { body } = await decide(acme.keys.test.publishable, { userId: "bot_1", action: "signup", ...botAttack(TOR_EXIT) });
    expect(body.data.decision).toBe("deny");
    expect(body.data.score).toBeGreaterThanOrEqual(80);
    expect(body.data.reasons).toEqual(expect.arrayContaining(["TOR_EXIT", "WEBDRIVER", "VM_DETECTED", "DISPOSABLE_EMAIL"]));
    for (const reason of body.data.reasons) expect(REASON_CODES).toContain(reason);
  });

  it("recognises real bots and automation by their user agents", async () => {
    for (const userAgent of [USER_AGENTS.headlessChrome, USER_AGENTS.googlebot, USER_AGENTS.curl, USER_AGENTS.pythonRequests]) {
      const { body } = await decide(acme.keys.test.secret, { userId: `ua_${userAgent.length}`, action: "login", ip: UK_IP, userAgent });
      expect(body.data.score, userAgent).toBeGreaterThanOrEqual(30);
      expect(body.data.reasons.some((r) => ["HEADLESS_BROWSER", "CRAWLER_USER_AGENT", "AUTOMATION_TOOL"].includes(r)), userAgent).toBe(true);
    }
  });

  it("takes the IP from the connection when omitted, and handles IPv6", async () => {
    const omitted = await decide(acme.keys.test.secret, { userId: "ip_user", action: "login", ...HUMAN_DESKTOP });
    const record = await getDecisionOf(acme.keys.test.secret, omitted.body.data.evidenceId);
    expect((record.request as { ip: string }).ip).toBe("127.0.0.1");
    const v6 = await decide(acme.keys.test.secret, { userId: "ip6_user", action: "login", ip: "2a0b:f4c2::1", ...HUMAN_DESKTOP });
    expect(v6.body.data.reasons).toContain("TOR_EXIT");
    // An IPv4 Tor exit seen through a NAT64 translator (an IPv6-only data centre) is still one.
    const nat64 = await decide(acme.keys.test.secret, { userId: "nat64_user", action: "login", ip: `64:ff9b::${TOR_EXIT}`, ...HUMAN_DESKTOP });
    expect(nat64.body.data.reasons).toContain("TOR_EXIT");
  });

  it("raises velocity and history signals from earlier decisions", async () => {
    let last: DecideBody | undefined;
    for (let i = 0; i < 8; i++) {
      last = (await decide(acme.keys.test.secret, { userId: "busy_user", action: "login", ip: UK_IP, deviceId: "dev_busy", ...HUMAN_DESKTOP })).body;
    }
    expect(last?.data.reasons).toContain("VELOCITY_BURST");
  });

  it("learns no location from a datacenter address, and measures no travel to one: its country is the cloud VM's or VPN's", async () => {
    // Sent by the account's backend, without the SDK's device object: no time zone for the VM's country to contradict.
    const login = { userId: "vpn_user", action: "login", deviceId: "dev_vpn", userAgent: HUMAN_DESKTOP.userAgent, behavior: HUMAN_DESKTOP.behavior };
    const historyOf = async (body: DecideBody) =>
      ((await getDecisionOf(acme.keys.test.secret, body.data.evidenceId)).signals as { history: Record<string, unknown> }).history;
    // A new user through a US cloud VM is allowed; the VM's country does not become the user's.
    const viaCloud = await decide(acme.keys.test.secret, { ...login, ip: DATACENTER_IP });
    expect(viaCloud.body.data).toMatchObject({ decision: "allow" });
    expect(viaCloud.body.data.reasons).toContain("DATACENTER_IP");
    // Seconds later from Germany, on the same device: no flight from the US, and no new country.
    const atHome = await decide(acme.keys.test.secret, { ...login, ip: DE_IP });
    expect(atHome.body.data).toMatchObject({ decision: "allow", reasons: ["LOW_RISK"] });
    expect(await historyOf(atHome.body)).toMatchObject({ userKnown: true, newDevice: false, newCountry: false, previousCountry: "", travelDistanceKm: null, impossibleTravel: false });
    // Known in Germany now, the user goes through the VM again: measured against Germany, it is no flight either.
    const viaCloudAgain = await decide(acme.keys.test.secret, { ...login, ip: DATACENTER_IP });
    expect(viaCloudAgain.body.data.reasons).not.toContain("IMPOSSIBLE_TRAVEL");
    expect(viaCloudAgain.body.data.reasons).not.toContain("NEW_COUNTRY");
    expect(await historyOf(viaCloudAgain.body)).toMatchObject({ newCountry: false, previousCountry: "DE", travelDistanceKm: null, impossibleTravel: false });
  });

  it("counts the +tag and Gmail dot spellings of one inbox as one e-mail: a run of signups from one mailbox is a burst", async () => {
    let last: DecideBody | undefined;
    for (let i = 1; i <= 8; i++) {
      const signup = { userId: `promo_${i}`, action: "signup", ip: `81.2.69.${100 + i}`, email: `jane.doe+promo${i}@gmail.com`, ...HUMAN_DESKTOP };
      last = (await decide(acme.keys.test.secret, signup)).body;
    }
    expect(last?.data.reasons).toContain("VELOCITY_BURST");
    const dotted = await decide(acme.keys.test.secret, { userId: "promo_9", action: "signup", ip: "81.2.69.109", email: "j.anedoe@gmail.com", ...HUMAN_DESKTOP });
    expect(dotted.body.data.reasons).toContain("VELOCITY_BURST");
    const signals = (await getDecisionOf(acme.keys.test.secret, dotted.body.data.evidenceId)).signals as { velocity: { email: { lastMinute: number } } };
    expect(signals.velocity.email.lastMinute).toBe(8);
  });

  it("returns the same answer for a retried Idempotency-Key without counting twice", async () => {
    const body = { userId: "idem_user", action: "checkout", amount: 49.9, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP };
    const first = await decide(acme.keys.test.secret, body, { "idempotency-key": "order-1234" });
    const second = await decide(acme.keys.test.secret, body, { "idempotency-key": "order-1234" });
    expect(second.body.data).toEqual(first.body.data);
    const count = server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'idem_user'").get() as { n: number };
    expect(count.n).toBe(1);
    const conflict = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": acme.keys.test.secret, "idempotency-key": "order-1234" },
      body: JSON.stringify({ ...body, amount: 5000 }),
    });
    expect(conflict.status).toBe(409);
    expect(((await conflict.json()) as { error: { code: string } }).error.code).toBe("CONFLICT");
  });

  it("keeps an Idempotency-Key per account and environment: another tenant sending the same key gets its own decision", async () => {
    const body = { userId: "idem_tenant_user", action: "checkout", amount: 12.5, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP };
    const headers = { "idempotency-key": "shared-order-77" };
    const mine = await decide(acme.keys.test.secret, body, headers);
    expect(mine.status).toBe(200);
    const otherAccount = await decide(globex.keys.test.secret, body, headers);
    const otherEnvironment = await decide(acme.keys.live.secret, body, headers);
    for (const other of [otherAccount, otherEnvironment]) {
      expect(other.status).toBe(200);
      expect(other.body.data.evidenceId).not.toBe(mine.body.data.evidenceId);
    }
    expect(otherEnvironment.body.data.evidenceId).not.toBe(otherAccount.body.data.evidenceId);
    // Each answer is a decision of its own tenant, stored there.
    expect((await getDecisionOf(globex.keys.test.secret, otherAccount.body.data.evidenceId)).evidenceId).toBe(otherAccount.body.data.evidenceId);
    expect((await getDecisionOf(acme.keys.live.secret, otherEnvironment.body.data.evidenceId)).environment).toBe("live");
    const count = server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'idem_tenant_user'").get() as { n: number };
    expect(count.n).toBe(3);
    // Each tenant's retry replays its own answer.
    expect((await decide(acme.keys.test.secret, body, headers)).body.data).toEqual(mine.body.data);
    expect((await decide(globex.keys.test.secret, body, headers)).body.data).toEqual(otherAccount.body.data);
    expect((await decide(acme.keys.live.secret, body, headers)).body.data).toEqual(otherEnvironment.body.data);
  });

  it("keeps the publishable key's Idempotency-Keys apart from the secret key's: the public key cannot claim the backend's", async () => {
    const headers = { "idempotency-key": "checkout-order-25072" };
    // Someone with the publishable key (it ships in browser code) claims the merchant's predictable key first.
    const claimed = await decide(acme.keys.test.publishable, { userId: "mallory", action: "checkout", amount: 1, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP }, headers);
    expect(claimed.status).toBe(200);
    // The backend's real checkout is evaluated, not refused as a conflict nor answered with the claim.
    const real = await decide(acme.keys.test.secret, { userId: "mallory", action: "checkout", amount: 5000, currency: "EUR", ...botAttack(TOR_EXIT) }, headers);
    expect(real.status).toBe(200);
    expect(real.body.data.decision).toBe("deny");
    const sameBody = await decide(acme.keys.test.secret, { userId: "mallory", action: "checkout", amount: 1, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP }, headers);
    expect(sameBody.status).toBe(409);
    // Each kind's retry replays its own answer.
    expect((await decide(acme.keys.test.publishable, { userId: "mallory", action: "checkout", amount: 1, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP }, headers)).body.data).toEqual(claimed.body.data);
  });

  it("refuses an empty Idempotency-Key, one longer than 255 characters or one sent twice with a 400 naming the header, and accepts 255", async () => {
    const body = { userId: "idem_length_user", action: "login", ip: UK_IP, ...HUMAN_DESKTOP };
    for (const key of ["", "k".repeat(256), "k".repeat(1000)]) {
      const res = await fetch(`${server.url}/api/v1/decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": acme.keys.test.secret, "idempotency-key": key },
        body: JSON.stringify(body),
      });
      expect(res.status, `${key.length} characters`).toBe(400);
      const error = (await res.json()) as { success: boolean; error: { code: string; message: string; details: { fieldViolations?: Array<{ field: string }> } } };
      expect(error).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR", message: expect.stringMatching(/Idempotency-Key/) } });
      expect(error.error.details.fieldViolations?.map((v) => v.field)).toEqual(["Idempotency-Key"]);
    }
    // Sent twice (two lines over HTTP/1.1, joined by a comma on the way in), or one value holding a comma.
    for (const key of [["order_1", "order_2"], ["order_1", "order_1"], "order_1,order_2"]) {
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request(`${server.url}/api/v1/decide`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": acme.keys.test.secret, "idempotency-key": key },
        });
        req.on("response", (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => (text += chunk));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
        });
        req.on("error", reject);
        req.end(JSON.stringify(body));
      });
      expect(answer.status, JSON.stringify(key)).toBe(400);
      expect(JSON.parse(answer.body)).toMatchObject({
        error: { code: "VALIDATION_ERROR", message: expect.stringContaining("Idempotency-Key carries more than one value"), details: { fieldViolations: [{ field: "Idempotency-Key" }] } },
      });
    }
    const count = () => (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'idem_length_user'").get() as { n: number }).n;
    expect(count()).toBe(0);
    const longest = "k".repeat(255);
    const accepted = await decide(acme.keys.test.secret, body, { "idempotency-key": longest });
    expect(accepted.status).toBe(200);
    expect((await decide(acme.keys.test.secret, body, { "idempotency-key": longest })).body.data).toEqual(accepted.body.data);
    expect(count()).toBe(1);
    // Characters, not bytes: 255 emoji (1,020 bytes of UTF-8, which a header carries as they are) are a key, 256 are not.
    const asSent = (text: string) => Buffer.from(text).toString("latin1");
    const emoji = await decide(acme.keys.test.secret, { ...body, userId: "idem_emoji_user" }, { "idempotency-key": asSent("😀".repeat(255)) });
    expect(emoji.status).toBe(200);
    expect((await decide(acme.keys.test.secret, { ...body, userId: "idem_emoji_user" }, { "idempotency-key": asSent("😀".repeat(256)) })).status).toBe(400);
  });

  it("answers concurrent decides each from its own input (the engine evaluates them in batches, over two threads)", async () => {
    const ips = [UK_IP, "8.8.8.8", TOR_EXIT, "2001:4860:4860::8888"];
    const countries = ["GB", "US", "DE", "US"];
    const calls = Array.from({ length: 40 }, (_, i) => ({ userId: `batch_user_${i}`, ip: ips[i % ips.length] as string }));
    const answers = await Promise.all(calls.map((call) => decide(acme.keys.test.secret, { ...call, action: "login" })));
    const records = await Promise.all(answers.map(({ body }) => getDecisionOf(acme.keys.test.secret, body.data.evidenceId)));
    records.forEach((record, i) => {
      const signals = record.signals as { geo: { country: string }; network: { tor: boolean } };
      expect((record.request as { userId: string }).userId).toBe(calls[i]?.userId);
      expect(signals.geo.country).toBe(countries[i % ips.length]);
      expect(signals.network.tor).toBe(i % ips.length === 2);
      expect(record.score).toBe(answers[i]?.body.data.score);
    });
  });

  it("stores evidence whose integrity hash matches its canonical content", async () => {
    const { body } = await decide(acme.keys.test.secret, { userId: "evidence_user", action: "login", ip: UK_IP });
    const row = server.app.db.prepare("SELECT content, integrity_hash FROM evidence WHERE id = ?").get(body.data.evidenceId) as { content: string; integrity_hash: string };
    const { createHash } = await import("node:crypto");
    expect(createHash("sha256").update(row.content).digest("hex")).toBe(row.integrity_hash);
    expect(JSON.parse(row.content)).toMatchObject({ evidenceId: body.data.evidenceId, score: body.data.score, decision: body.data.decision });
  });
});

interface VelocitySignals {
  velocity: { ip: { lastMinute: number }; usersPerIp24h: number };
}

async function getDecisionOf(key: string, evidenceId: string): Promise<Record<string, unknown>> {
  const row = server.app.db.prepare("SELECT id FROM decisions WHERE evidence_id = ?").get(evidenceId) as { id: string };
  const res = await fetch(`${server.url}/api/v1/decisions/${row.id}`, { headers: { "x-api-key": key } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: Record<string, unknown> }).data;
}

describe("GET /api/v1/decisions/{id}", () => {
  it("returns the full record with signals and per-signal contributions", async () => {
    const { body } = await decide(acme.keys.live.secret, { userId: "record_user", action: "signup", ...botAttack(TOR_EXIT) });
    const record = await getDecisionOf(acme.keys.live.secret, body.data.evidenceId);
    expect(record).toMatchObject({ evidenceId: body.data.evidenceId, environment: "live", decision: "deny", score: body.data.score, signalCoverage: "full", weightsVersion: 1 });
    expect(record.id).toMatch(/^dec_/);
    expect((record.signals as { network: { tor: boolean } }).network.tor).toBe(true);
    const contributions = record.contributions as Array<{ signal: string; reason: string; points: number }>;
    expect(contributions.find((c) => c.reason === "TOR_EXIT")).toMatchObject({ signal: "network.tor" });
    expect(Math.round(contributions.reduce((sum, c) => sum + c.points, 0))).toBe(body.data.score);
    expect(Object.keys(record.categoryScores as object)).toEqual(expect.arrayContaining(["network", "device", "velocity"]));
  });

  it("finds the record by the evidence id the decide answer carries, and names both prefixes when given neither", async () => {
    const { body } = await decide(acme.keys.live.secret, { userId: "by_evidence", action: "login", ip: UK_IP });
    const res = await fetch(`${server.url}/api/v1/decisions/${body.data.evidenceId}`, { headers: { "x-api-key": acme.keys.live.secret } });
    expect(res.status).toBe(200);
    // An account's data, asked for with a key in a header: no cache may keep it for the URL.
    expect(res.headers.get("cache-control")).toBe("no-store");
    const record = ((await res.json()) as { data: { id: string; evidenceId: string } }).data;
    expect(record.evidenceId).toBe(body.data.evidenceId);
    expect(record).toEqual(await getDecisionOf(acme.keys.live.secret, body.data.evidenceId));
    const wrong = await fetch(`${server.url}/api/v1/decisions/${body.data.requestId}`, { headers: { "x-api-key": acme.keys.live.secret } });
    expect(wrong.status).toBe(400);
    expect(wrong.headers.get("cache-control")).toBe("no-store");
    expect(((await wrong.json()) as { error: { message: string } }).error.message).toMatch(/id must start with dec_ or evi_/);
  });

  it("never shows a decision to another account or environment", async () => {
    const { body } = await decide(acme.keys.live.secret, { userId: "private_user", action: "login", ip: UK_IP });
    const row = server.app.db.prepare("SELECT id FROM decisions WHERE evidence_id = ?").get(body.data.evidenceId) as { id: string };
    for (const key of [acme.keys.test.secret, globex.keys.live.secret, globex.keys.test.secret]) {
      for (const id of [row.id, body.data.evidenceId]) {
        const res = await fetch(`${server.url}/api/v1/decisions/${id}`, { headers: { "x-api-key": key } });
        expect(res.status).toBe(404);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe("NOT_FOUND");
      }
    }
    expect((await fetch(`${server.url}/api/v1/decisions/${row.id}`, { headers: { "x-api-key": acme.keys.live.publishable } })).status).toBe(403);
  });

  it("counts an IP once whatever its notation (IPv6 case and zero compression, IPv4-mapped IPv6)", async () => {
    const spellings = ["2a00:1450:4009:81f::200e", "2A00:1450:4009:081F:0:0:0:200E", "2a00:1450:4009:81f:0::200e"];
    for (let i = 0; i < 6; i++) {
      await decide(globex.keys.test.secret, { userId: `notation_${i}`, action: "login", ip: spellings[i % 3], ...HUMAN_DESKTOP });
    }
    const v6 = await decide(globex.keys.test.secret, { userId: "notation_last", action: "login", ip: "2a00:1450:4009:81F::200E", ...HUMAN_DESKTOP });
    const v6Signals = (await getDecisionOf(globex.keys.test.secret, v6.body.data.evidenceId)).signals as VelocitySignals;
    expect(v6Signals.velocity.ip.lastMinute).toBe(6);
    expect(v6Signals.velocity.usersPerIp24h).toBe(7);

    for (let i = 0; i < 4; i++) {
      await decide(globex.keys.test.secret, { userId: `mapped_${i}`, action: "login", ip: i % 2 ? "::ffff:81.2.69.150" : "81.2.69.150", ...HUMAN_DESKTOP });
    }
    const v4 = await decide(globex.keys.test.secret, { userId: "mapped_last", action: "login", ip: "::FFFF:81.2.69.150", ...HUMAN_DESKTOP });
    expect(((await getDecisionOf(globex.keys.test.secret, v4.body.data.evidenceId)).signals as VelocitySignals).velocity.ip.lastMinute).toBe(4);
  });

  it("keeps velocity per account and environment", async () => {
    for (let i = 0; i < 8; i++) await decide(globex.keys.live.secret, { userId: "shared_name", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    const other = await decide(acme.keys.live.secret, { userId: "shared_name", action: "login", ip: "81.2.69.161", ...HUMAN_DESKTOP });
    expect(other.body.data.reasons).toEqual(["LOW_RISK"]);
  });
});

describe("decide over gRPC", () => {
  it("serves the same handler to @grpc/grpc-js", async () => {
    const client = grpcClient(server.port);
    try {
      const result = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "grpc_user", action: "login", ip: "2001:db8::1", userAgent: USER_AGENTS.iphoneSafari }, { authorization: `Bearer ${acme.keys.test.secret}` });
      expect(result.error).toBeNull();
      expect(result.response?.evidenceId).toMatch(/^evi_/);
      expect(result.response?.reasons).toContain("RESERVED_IP");
      const row = server.app.db.prepare("SELECT id FROM decisions WHERE evidence_id = ?").get(result.response?.evidenceId) as { id: string };
      const record = await grpcUnary(client, DecisionService, "GetDecision", GetDecisionRequestSchema, GetDecisionResponseSchema, { id: row.id }, { "x-api-key": acme.keys.test.secret });
      expect(record.response?.decision?.request?.ip).toBe("2001:db8::1");
      const foreign = await grpcUnary(client, DecisionService, "GetDecision", GetDecisionRequestSchema, GetDecisionResponseSchema, { id: row.id }, { "x-api-key": globex.keys.test.secret });
      expect(foreign.error?.code).toBe(grpc.status.NOT_FOUND);
    } finally {
      client.close();
    }
  });
});

describe("POST /api/v1/analyze", () => {
  interface AnalyzeBody { decision: string; riskLevel: string; visitorId: string; deviceFingerprintId: string; deviceHash: string; hasElevatedRisk: boolean; riskReasons: string[]; signalCoverage: string; processingTimeMs: number; decisionId: string }
  const analyze = async (key: string, body: Record<string, unknown>) => {
    const res = await fetch(`${server.url}/api/v1/analyze`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as AnalyzeBody };
  };

  it("answers exactly part 2.3 as a bare object", async () => {
    const { status, body } = await analyze(acme.keys.test.publishable, { userId: "edge_user", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(status).toBe(200);
    expect(Object.keys(body).sort()).toEqual(["decision", "decisionId", "deviceFingerprintId", "deviceHash", "hasElevatedRisk", "processingTimeMs", "riskLevel", "riskReasons", "signalCoverage", "visitorId"]);
    expect(body).toMatchObject({ decision: "allow", riskLevel: "low", hasElevatedRisk: false, riskReasons: [], signalCoverage: "full" });
    expect(body.visitorId).toMatch(/^vis_/);
    expect(body.deviceFingerprintId).toMatch(/^dfp_/);
    expect(body.decisionId).toMatch(/^dec_/);
    expect(body.deviceHash).toMatch(/^[0-9a-f]{12}$/);
  });

  it("keeps visitorId stable for the same device and distinct across accounts", async () => {
    const device = { action: "login", ip: UK_IP, ...HUMAN_DESKTOP };
    const a = await analyze(acme.keys.test.secret, { ...device, userId: "a" });
    const b = await analyze(acme.keys.test.secret, { ...device, userId: "b", ip: "81.2.69.170" });
    const other = await analyze(globex.keys.test.secret, device);
    expect(b.body.visitorId).toBe(a.body.visitorId);
    expect(other.body.visitorId).not.toBe(a.body.visitorId);
    expect(other.body.deviceHash).toBe(a.body.deviceHash);
  });

  it("tells apart visitors who send no device data by their network, and keeps each one's id", async () => {
    const browser = { action: "login", userAgent: HUMAN_DESKTOP.userAgent };
    const alice = await analyze(acme.keys.test.secret, { ...browser, userId: "alice", ip: "81.2.69.160" });
    const bob = await analyze(acme.keys.test.secret, { ...browser, userId: "bob", ip: "81.2.69.161" });
    const aliceAgain = await analyze(acme.keys.test.secret, { ...browser, userId: "alice", ip: "::ffff:81.2.69.160" });
    expect(bob.body.visitorId).not.toBe(alice.body.visitorId);
    expect(aliceAgain.body.visitorId).toBe(alice.body.visitorId);
    // An IPv6 client keeps its id while its address rotates within its /64.
    const v6 = await analyze(acme.keys.test.secret, { ...browser, ip: "2a02:c7f:1234:5678::1" });
    const v6Rotated = await analyze(acme.keys.test.secret, { ...browser, ip: "2a02:c7f:1234:5678:a1b2:c3d4:e5f6:1" });
    const v6Elsewhere = await analyze(acme.keys.test.secret, { ...browser, ip: "2a02:c7f:1234:5679::1" });
    expect(v6Rotated.body.visitorId).toBe(v6.body.visitorId);
    expect(v6Elsewhere.body.visitorId).not.toBe(v6.body.visitorId);
    // An empty device object is no device data: it neither merges two networks' visitors nor counts as coverage.
    const aliceEmpty = await analyze(acme.keys.test.secret, { ...browser, userId: "alice", ip: "81.2.69.160", device: {} });
    const bobEmpty = await analyze(acme.keys.test.secret, { ...browser, userId: "bob", ip: "81.2.69.161", device: { languages: [], platform: "" } });
    expect(aliceEmpty.body.visitorId).toBe(alice.body.visitorId);
    expect(bobEmpty.body.visitorId).toBe(bob.body.visitorId);
    expect([aliceEmpty.body.signalCoverage, bobEmpty.body.signalCoverage]).toEqual([alice.body.signalCoverage, bob.body.signalCoverage]);
    expect(alice.body.signalCoverage).toBe("partial");
    // Nor does a device object that names no hardware (only webdriver, or a time zone): millions share it.
    for (const device of [{ webdriver: false }, { timezone: "Europe/London", languages: ["en-GB"] }]) {
      const here = await analyze(acme.keys.test.secret, { ...browser, ip: "81.2.69.160", device });
      const there = await analyze(acme.keys.test.secret, { ...browser, ip: "81.2.69.161", device });
      expect(there.body.visitorId, JSON.stringify(device)).not.toBe(here.body.visitorId);
    }
    // A caller's own device id wins over both.
    const byId = await analyze(acme.keys.test.secret, { ...browser, deviceId: "dev_alice", ip: "81.2.69.160" });
    const byIdElsewhere = await analyze(acme.keys.test.secret, { ...browser, deviceId: "dev_alice", ip: "81.2.69.99" });
    expect(byIdElsewhere.body.visitorId).toBe(byId.body.visitorId);
    expect(byId.body.visitorId).not.toBe(alice.body.visitorId);
  });

  it("reads the account's deny lists as decide does", async () => {
    const key = acme.keys.live.secret;
    const send = (method: string, path: string, body: unknown) =>
      fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
    expect((await send("PUT", "/api/v1/lists/analyze_blocked_users", { kind: "user", type: "deny" })).status).toBe(201);
    expect((await send("POST", "/api/v1/lists/analyze_blocked_users/entries", { entries: [{ value: "mallory" }] })).status).toBe(200);
    const listed = await analyze(key, { userId: "mallory", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(listed.body).toMatchObject({ decision: "deny", hasElevatedRisk: true, riskReasons: expect.arrayContaining(["DENYLISTED"]) });
    const other = await analyze(key, { userId: "trent", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(other.body).toMatchObject({ decision: "allow", riskReasons: [] });
  });

  it("keeps a visitor id the browser SDK sends back as its deviceId, instead of keying it into another", async () => {
    const first = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    const echoed = await analyze(acme.keys.test.secret, { action: "login", ip: "81.2.69.170", ...HUMAN_DESKTOP, deviceId: first.body.visitorId });
    const again = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP, ...HUMAN_DESKTOP, deviceId: echoed.body.visitorId });
    expect([echoed.body.visitorId, again.body.visitorId]).toEqual([first.body.visitorId, first.body.visitorId]);
    // Any other device id is keyed, as before: what looks almost like a visitor id is not one.
    const other = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP, ...HUMAN_DESKTOP, deviceId: `${first.body.visitorId}0` });
    expect(other.body.visitorId).toMatch(/^vis_[0-9a-f]{24}$/);
    expect(other.body.visitorId).not.toBe(first.body.visitorId);
  });

  it("gives the same device unrelated ids in the test and live environments", async () => {
    const device = { action: "login", ip: UK_IP, ...HUMAN_DESKTOP };
    const inTest = await analyze(acme.keys.test.secret, device);
    const inLive = await analyze(acme.keys.live.secret, device);
    expect(inLive.body.visitorId).not.toBe(inTest.body.visitorId);
    expect(inLive.body.deviceFingerprintId).not.toBe(inTest.body.deviceFingerprintId);
    expect(inLive.body.deviceHash).toBe(inTest.body.deviceHash);
  });

  it("bands elevated risk and lowers coverage without device data", async () => {
    const risky = await analyze(acme.keys.test.secret, { action: "signup", ...botAttack(TOR_EXIT) });
    expect(["high", "critical"]).toContain(risky.body.riskLevel);
    expect(risky.body.hasElevatedRisk).toBe(true);
    expect(risky.body.decision).toBe("deny");
    expect(risky.body.riskReasons).toContain("TOR_EXIT");
    const bare = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP });
    expect(bare.body.signalCoverage).toBe("minimal");
    // A user agent of spaces is none: the engine reads it as missing, and coverage says so too.
    const blankAgent = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP, ...HUMAN_DESKTOP, userAgent: "   " });
    expect(blankAgent.body.riskReasons).toContain("MISSING_USER_AGENT");
    expect(blankAgent.body.signalCoverage).toBe("partial");
    const onlyBlankAgent = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP, userAgent: "   " });
    expect(onlyBlankAgent.body.signalCoverage).toBe("minimal");
  });

  it("creates no decision record, audit entry or case", async () => {
    const before = (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n;
    const { body } = await analyze(acme.keys.test.secret, { action: "login", ip: UK_IP });
    expect((server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n).toBe(before);
    const res = await fetch(`${server.url}/api/v1/decisions/${body.decisionId}`, { headers: { "x-api-key": acme.keys.test.secret } });
    expect(res.status).toBe(404);
    // Its decisionId identifies it in the logs: its request line names it.
    await expect.poll(() => server.logs.find((line) => line.includes('"msg":"request"') && line.includes(`"decisionId":"${body.decisionId}"`))).toMatch(/"route":"POST \/api\/v1\/analyze"/);
  });
});

describe("dual path", () => {
  // One engine thread whose store reads take 3 s: the comprehensive path misses its 20 ms budget, and the
  // thread is busy with it for seconds. Answers must not wait for that thread.
  const STORE_LATENCY_MS = 3000;

  it("answers from the fast path with partial coverage when the comprehensive path misses its budget, and records both", async () => {
    const slow = await startTestServer({ config: { comprehensiveBudgetMs: 20, engineThreads: 1 }, storeLatencyMs: STORE_LATENCY_MS });
    try {
      const { keys } = slow.createAccount();
      const post = (path: string, body: Record<string, unknown>) =>
        fetch(`${slow.url}${path}`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": keys.test.secret }, body: JSON.stringify(body) });
      const recordOf = (evidenceId: string) =>
        JSON.parse((slow.app.db.prepare("SELECT record FROM decisions WHERE evidence_id = ?").get(evidenceId) as { record: string }).record) as { signalCoverage: string; lateComprehensive?: { score: number } };
      const [decided, analyzed] = await Promise.all([
        post("/api/v1/decide", { userId: "slow_user", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }),
        // An analyze behind the stuck thread is answered too, its fast path computed on the request thread.
        new Promise((resolve) => setTimeout(resolve, 5)).then(() => post("/api/v1/analyze", { userId: "slow_user", action: "login", ip: UK_IP, ...HUMAN_DESKTOP })),
      ]);
      const body = (await decided.json()) as DecideBody;
      expect(decided.status).toBe(200);
      expect(analyzed.status).toBe(200);
      expect(((await analyzed.json()) as { riskLevel: string }).riskLevel).toBe("low");
      // Both answers came while the thread still held the comprehensive evaluation: it is not recorded yet.
      const record = recordOf(body.data.evidenceId);
      expect(record.signalCoverage).toBe("partial");
      expect(record.lateComprehensive).toBeUndefined();
      const fast = (await decideConfidenceBaseline()).data.confidence;
      expect(body.data.confidence).toBeLessThan(fast);
      // The late comprehensive outcome is added once it arrives.
      await expect.poll(() => recordOf(body.data.evidenceId).lateComprehensive, { timeout: 2 * STORE_LATENCY_MS + 5000 }).toMatchObject({ score: expect.any(Number) });
    } finally {
      await slow.close();
    }
  }, 30_000);
});

/** The same clean request on the normal server, where the comprehensive path answers in time. */
function decideConfidenceBaseline() {
  return decide(acme.keys.test.secret, { userId: "slow_user", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }).then((r) => r.body);
}

describe("Idempotency-Key expiry", () => {
  it("replays a stored answer for 24 hours, then makes a new decision for the same key and body", async () => {
    const clock = new ManualClock();
    const timed = await startTestServer({ clock, config: { engineThreads: 1 } });
    try {
      const { keys } = timed.createAccount();
      const send = async () => {
        const res = await fetch(`${timed.url}/api/v1/decide`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": keys.test.secret, "idempotency-key": "order-expiring" },
          body: JSON.stringify({ userId: "expiring_user", action: "checkout", amount: 20, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP }),
        });
        expect(res.status).toBe(200);
        return ((await res.json()) as DecideBody).data;
      };
      const first = await send();
      clock.advance(IDEMPOTENCY_TTL_MS - 1);
      expect(await send()).toEqual(first);
      clock.advance(2);
      const later = await send();
      expect(later.evidenceId).not.toBe(first.evidenceId);
      expect((timed.app.db.prepare("SELECT COUNT(*) AS n FROM decisions WHERE user_id = 'expiring_user'").get() as { n: number }).n).toBe(2);
      // The new answer is the one replayed from now on.
      expect(await send()).toEqual(later);
    } finally {
      await timed.close();
    }
  });
});

describe("list files", () => {
  it("warns at start about a configured list it cannot read, and picks the file up once it appears", async () => {
    const dir = tempDir("tor-later-");
    const torPath = path.join(dir, "exits.txt");
    const later = await startTestServer({ config: { torExitListPath: torPath, engineThreads: 1 } });
    try {
      const warning = later.logs.map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.variable === "FRAUD_TOR_EXIT_LIST");
      expect(warning).toMatchObject({ level: "warn", path: torPath, error: expect.stringMatching(/ENOENT/) });
      const { keys } = later.createAccount();
      const reasons = async () => {
        const res = await fetch(`${later.url}/api/v1/decide`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": keys.test.secret },
          body: JSON.stringify({ userId: "tor_later", action: "login", ip: TOR_EXIT, ...HUMAN_DESKTOP }),
        });
        return ((await res.json()) as DecideBody).data.reasons;
      };
      expect(await reasons()).not.toContain("TOR_EXIT");
      fs.writeFileSync(torPath, `${TOR_EXIT}\n`);
      // The engine threads look at the file at most once a second.
      await expect.poll(reasons, { timeout: 5000, interval: 250 }).toContain("TOR_EXIT");
    } finally {
      await later.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("decides sent at once", () => {
  // A generous budget: these read the comprehensive path's velocity, never the fast fallback.
  let burst: TestServer;
  let key: string;
  beforeAll(async () => {
    // Store reads held 50 ms: the decides of a burst are all in flight at once, whatever the machine's speed.
    burst = await startTestServer({ config: { comprehensiveBudgetMs: 5_000, engineThreads: 1 }, storeLatencyMs: 50 });
    key = burst.createAccount("Burst").keys.test.secret;
  });
  afterAll(() => burst.close());

  const send = (body: Record<string, unknown>) =>
    fetch(`${burst.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) }).then(
      async (res) => ((await res.json()) as DecideBody).data,
    );

  const userLastMinute = async (evidenceId: string): Promise<number> => {
    const res = await fetch(`${burst.url}/api/v1/decisions/${evidenceId}`, { headers: { "x-api-key": key } });
    return ((await res.json()) as { data: { signals: { velocity: { user: { lastMinute: number } } } } }).data.signals.velocity.user.lastMinute;
  };

  it("see each other in their velocity, as decides sent one after another do, each counted once", async () => {
    // A bot's credential stuffing: one user, twenty logins at once. None of them is stored when the others
    // are evaluated; the ones admitted before each still count.
    const answers = await Promise.all(Array.from({ length: 20 }, () => send({ userId: "stuffed", action: "login", ip: UK_IP, deviceId: "dev_stuffed", ...HUMAN_DESKTOP })));
    // Each sees those admitted before it: from the sixth on (a burst is five in a minute), as one after another.
    expect(answers.filter((answer) => answer.reasons.includes("VELOCITY_BURST")).length).toBeGreaterThanOrEqual(15);
    // The k-th admitted sees at least the k - 1 before it; one stored while another was evaluated is counted
    // once (stored, not also in flight), so none sees more than the 19 others. (A decide admitted after this
    // one but stored before its store reads is among them: the counters are read as of the evaluation.)
    const seen = (await Promise.all(answers.map((answer) => userLastMinute(answer.evidenceId)))).sort((a, b) => a - b);
    seen.forEach((count, index) => expect(count).toBeGreaterThanOrEqual(index));
    expect(Math.max(...seen)).toBeLessThanOrEqual(19);
  });

  it("count past the highest threshold, however many are in flight at once", async () => {
    const big = burst.createAccount("Big burst", { decide: 1_000 }).keys.test.secret;
    const answers = await Promise.all(
      Array.from({ length: 70 }, (_, i) =>
        fetch(`${burst.url}/api/v1/decide`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": big },
          body: JSON.stringify({ userId: `farm_${i}`, action: "signup", ip: "81.2.69.150", ...HUMAN_DESKTOP }),
        }).then(async (res) => ((await res.json()) as DecideBody).data),
      ),
    );
    const ipLastHour = async (evidenceId: string): Promise<number> => {
      const res = await fetch(`${burst.url}/api/v1/decisions/${evidenceId}`, { headers: { "x-api-key": big } });
      return ((await res.json()) as { data: { signals: { velocity: { ip: { lastHour: number } } } } }).data.signals.velocity.ip.lastHour;
    };
    const seen = (await Promise.all(answers.map((answer) => ipLastHour(answer.evidenceId)))).sort((a, b) => a - b);
    // The k-th sees at least the k - 1 before it, past 60 an hour (the IP's hourly threshold) too.
    seen.forEach((count, index) => expect(count).toBeGreaterThanOrEqual(index));
    expect(Math.max(...seen)).toBeLessThanOrEqual(69);
    expect(answers.filter((answer) => answer.reasons.includes("HIGH_VELOCITY_HOURLY")).length).toBeGreaterThanOrEqual(9);
  });

  it("do not count the retries of one decide (one Idempotency-Key) as decides of their own", async () => {
    // An address of its own: the burst above shares UK_IP.
    const body = JSON.stringify({ userId: "retried", action: "login", ip: "81.2.69.201", deviceId: "dev_retried", ...HUMAN_DESKTOP });
    const retry = () => fetch(`${burst.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key, "idempotency-key": "order-77" }, body }).then(async (res) => ((await res.json()) as DecideBody).data);
    // Six retries in flight at once, then a decide of the same user once they are all answered: it sees
    // what they counted.
    const answered = await Promise.all(Array.from({ length: 6 }, retry));
    const plain = await send({ userId: "retried", action: "login", ip: "81.2.69.201", deviceId: "dev_retried", ...HUMAN_DESKTOP });
    expect(new Set(answered.map((answer) => answer.evidenceId)).size).toBe(1);
    // One decide before it, whatever its retries: not six.
    expect(await userLastMinute(plain.evidenceId)).toBe(1);
    expect(plain.reasons).not.toContain("VELOCITY_BURST");
  });

  it("see each other's users on a shared device", async () => {
    const answers = await Promise.all(
      Array.from({ length: 15 }, (_, i) => send({ userId: `signup_${i}`, action: "signup", ip: "81.2.69.77", deviceId: "dev_farm", email: `jane.doe${i}@example.co.uk`, ...HUMAN_DESKTOP })),
    );
    // From the third user on (three users on one device in a day), as one after another.
    expect(answers.filter((answer) => answer.reasons.includes("MULTI_ACCOUNT_DEVICE")).length).toBeGreaterThanOrEqual(13);
  });
});

describe("an Idempotency-Key on a decide that leaves ip out", () => {
  let proxied: TestServer;
  let account: ReturnType<TestServer["createAccount"]>;
  beforeAll(async () => {
    proxied = await startTestServer({ env: { FRAUD_TRUSTED_PROXIES: "127.0.0.1" } });
    account = proxied.createAccount("Proxied");
  });
  afterAll(() => proxied.close());

  it("replays only for the same client address: a retry resolved to another address is another request (409)", async () => {
    const send = (forwardedFor: string) =>
      fetch(`${proxied.url}/api/v1/decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": account.keys.test.publishable, "idempotency-key": "signup-42", "x-forwarded-for": forwardedFor },
        body: JSON.stringify({ userId: "u42", action: "signup", ...HUMAN_DESKTOP }),
      });
    const first = await send(UK_IP);
    expect(first.status).toBe(200);
    const retry = await send(UK_IP);
    expect(((await retry.json()) as DecideBody).data).toEqual(((await first.json()) as DecideBody).data);
    const fromTor = await send(TOR_EXIT);
    expect(fromTor.status).toBe(409);
    expect(((await fromTor.json()) as { error: { message: string } }).error.message).toMatch(/client address/);
  });
});
