import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashIndicator, indicatorsOf, signBatch, type Indicator } from "../src/consortium/indicators.js";
import { canonicalMailbox } from "../src/engine/index.js";
import { membershipProblems } from "../src/consortium/membership.js";
import { queueIndicators } from "../src/consortium/sharing.js";
import { ConsortiumRepository } from "../src/store/consortium.js";
import { HUMAN_DESKTOP } from "./helpers/inputs.js";
import { runFraudctl } from "./helpers/process.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

/** The consortium-wide secret every member configures. */
const CONSORTIUM_KEY = "ck_7rVq2mXb9LwP4sTz8NcY3dKf6HgJ1aEu";
const config = { engineThreads: 1 };

let hub: TestServer;
let member: TestServer;
let hubOperator: ReturnType<TestServer["createAccount"]>;
let hubMerchant: ReturnType<TestServer["createAccount"]>;
let memberMerchant: ReturnType<TestServer["createAccount"]>;
let memberToken: string;

async function fraudctl(server: TestServer, args: string[]): Promise<string> {
  const result = await runFraudctl(args, { FRAUD_DATA_DIR: server.dataDir, FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" });
  expect(result.code, result.stderr).toBe(0);
  return result.stdout;
}

beforeAll(async () => {
  // Two installations with their own data directories: a consortium hub and a member.
  hub = await startTestServer({ config });
  member = await startTestServer({ config: { ...config, webhookAllowPrivate: true } });
  hubOperator = hub.createAccount("Consortium operator");
  hubMerchant = hub.createAccount("Merchant B");
  memberMerchant = member.createAccount("Merchant A");
  // The member's credential at the hub: a key that can do nothing but submit indicators.
  memberToken = hub.app.keys.issue({ accountId: hubOperator.account.id, environment: "live", kind: "secret", permissions: ["consortium:write"], name: "member A" }).key;
  await fraudctl(hub, ["consortium", "set", "--account", hubOperator.account.id, "--env", "live", "--key", CONSORTIUM_KEY]);
  await fraudctl(hub, ["consortium", "set", "--account", hubMerchant.account.id, "--env", "live", "--key", CONSORTIUM_KEY]);
  const joined = await fraudctl(member, [
    "consortium", "set", "--account", memberMerchant.account.id, "--env", "live",
    "--key", CONSORTIUM_KEY, "--url", `${hub.url}/api/v1/consortium/indicators`, "--token", memberToken,
  ]);
  expect(joined).toContain("sharing with");
}, 30_000);
afterAll(async () => {
  await Promise.all([hub.close(), member.close()]);
});

async function post<T>(server: TestServer, key: string, path: string, body: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as T };
}

async function decide(server: TestServer, key: string, body: Record<string, unknown>) {
  const { status, body: answer } = await post<{ data: { score: number; reasons: string[]; evidenceId: string } }>(server, key, "/api/v1/decide", body);
  expect(status).toBe(200);
  const { id } = server.app.db.prepare("SELECT id FROM decisions WHERE evidence_id = ?").get(answer.data.evidenceId) as { id: string };
  const record = await fetch(`${server.url}/api/v1/decisions/${id}`, { headers: { "x-api-key": key } });
  const { data } = (await record.json()) as { data: { signals: { consortium: { available: boolean; matches: number; indicatorTypes: string[] } } } };
  return { ...answer.data, decisionId: id, consortium: data.signals.consortium };
}

const fraudster = { action: "checkout", amount: 80, currency: "EUR", email: "mallory.fraud@gmail.com", deviceId: "dev_mallory_1", ip: "81.2.69.222", ...HUMAN_DESKTOP };

describe("consortium sharing between two installations", () => {
  it("makes a fraudster labelled on one installation score higher on the other", async () => {
    const before = await decide(hub, hubMerchant.keys.live.secret, { ...fraudster, userId: "b_customer_1" });
    expect(before.consortium).toEqual({ available: true, matches: 0, indicatorTypes: [] });
    expect(before.reasons).not.toContain("CONSORTIUM_MATCH");

    const seen = await decide(member, memberMerchant.keys.live.secret, { ...fraudster, userId: "a_customer_9" });
    const { status, body } = await post<{ data: { consortiumShared: boolean } }>(member, memberMerchant.keys.live.secret, "/api/v1/feedback", { decisionId: seen.decisionId, actualOutcome: "fraud" });
    expect(status).toBe(200);
    expect(body.data.consortiumShared).toBe(true);

    // The member's outbox delivers the signed batch to the hub.
    const count = () => (hub.app.db.prepare("SELECT COUNT(*) AS n FROM consortium_indicators WHERE environment = 'live'").get() as { n: number }).n;
    for (let i = 0; i < 300 && count() < 3; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(count()).toBe(3);

    // The same person at the hub's merchant, with another spelling of the same Gmail mailbox.
    const after = await decide(hub, hubMerchant.keys.live.secret, { ...fraudster, userId: "b_customer_2", email: "Mallory.Fraud+shop@googlemail.com" });
    expect(after.consortium).toEqual({ available: true, matches: 3, indicatorTypes: ["email", "device", "ip"] });
    expect(after.reasons).toContain("CONSORTIUM_MATCH");
    expect(after.score).toBeGreaterThan(before.score + 20);

    // Accounts outside the consortium, and the other environment, see nothing.
    const outsider = hub.createAccount("Not a member");
    const unaffected = await decide(hub, outsider.keys.live.secret, { ...fraudster, userId: "c_customer" });
    expect(unaffected.consortium.available).toBe(false);
    expect(unaffected.reasons).not.toContain("CONSORTIUM_MATCH");
  });

  it("shares keyed hashes only: no raw value and no account identity reaches the hub", () => {
    const stored = JSON.stringify([
      ...(hub.app.db.prepare("SELECT * FROM consortium_indicators").all() as unknown[]),
      ...(hub.app.db.prepare("SELECT * FROM consortium_batches").all() as unknown[]),
    ]);
    for (const secret of ["mallory", "dev_mallory_1", "81.2.69.222", memberMerchant.account.id, "a_customer_9"]) expect(stored).not.toContain(secret);
    expect(stored).toContain(hashIndicator(CONSORTIUM_KEY, "email", "malloryfraud@gmail.com"));
    expect(canonicalMailbox(" Mallory.Fraud+shop@GoogleMail.com ")).toBe("malloryfraud@gmail.com");
  });

  it("shares no address that is not public: a backend's own would match every member's customers", () => {
    expect(indicatorsOf({ email: "", deviceId: "", ip: "::ffff:81.2.69.222" }, CONSORTIUM_KEY)).toEqual([{ type: "ip", hash: hashIndicator(CONSORTIUM_KEY, "ip", "81.2.69.222") }]);
    for (const ip of ["127.0.0.1", "10.0.0.5", "192.168.1.20", "100.64.3.4", "fd00::1"]) {
      expect(indicatorsOf({ email: "", deviceId: "", ip }, CONSORTIUM_KEY), ip).toEqual([]);
    }
  });

  it("shares nothing from a membership saved, before tokens were checked, with a token of the other environment", async () => {
    const tenant = { accountId: memberMerchant.account.id, environment: "test" } as const;
    // What an earlier release let `consortium set --env test --token sk_live_...` store.
    new ConsortiumRepository(member.app.db).putSettings(tenant, { key: CONSORTIUM_KEY, shareUrl: `${hub.url}/api/v1/consortium/indicators`, shareToken: memberToken }, Date.now());
    const labelled = await decide(member, memberMerchant.keys.test.secret, { ...fraudster, userId: "crossed_env_user" });
    const { body } = await post<{ data: { consortiumShared: boolean } }>(member, memberMerchant.keys.test.secret, "/api/v1/feedback", { decisionId: labelled.decisionId, actualOutcome: "fraud" });
    expect(body.data.consortiumShared).toBe(false);
    expect(member.app.db.prepare("SELECT COUNT(*) AS n FROM outbox WHERE kind = 'consortium.share' AND environment = 'test'").get()).toEqual({ n: 0 });
    new ConsortiumRepository(member.app.db).deleteSettings(tenant);
  });

  it("does not send a batch hashed with a consortium key since replaced: the hub could match none of its hashes", async () => {
    const tenant = { accountId: memberMerchant.account.id, environment: "test" } as const;
    const testToken = hub.app.keys.issue({ accountId: hubOperator.account.id, environment: "test", kind: "secret", permissions: ["consortium:write"], name: "member A, test" }).key;
    const settings = new ConsortiumRepository(member.app.db);
    // `consortium set` gave the membership a new key after a feedback queued a batch hashed with the old one.
    settings.putSettings(tenant, { key: "ck_Np4sW8qLz2Xv6Tb9Rm3Hc7Jd5Kf1Gy0A", shareUrl: `${hub.url}/api/v1/consortium/indicators`, shareToken: testToken }, Date.now());
    queueIndicators(member.app.outbox, tenant, indicatorsOf({ email: fraudster.email, deviceId: fraudster.deviceId, ip: fraudster.ip }, CONSORTIUM_KEY), CONSORTIUM_KEY);
    await member.app.settled();
    expect(member.app.outbox.deadLetters(tenant, 10, 0)).toEqual([
      expect.objectContaining({ kind: "consortium.share", lastError: expect.stringContaining("hashed with a consortium key no longer in use") }),
    ]);
    expect(hub.app.db.prepare("SELECT COUNT(*) AS n FROM consortium_batches WHERE environment = 'test'").get()).toEqual({ n: 0 });
    member.app.db.prepare("DELETE FROM outbox WHERE kind = 'consortium.share' AND environment = 'test'").run();
    settings.deleteSettings(tenant);
  });

  it("accepts only signed, fresh batches from keys with consortium:write, and stores a batch once", async () => {
    const indicators: Indicator[] = [{ type: "device", hash: hashIndicator(CONSORTIUM_KEY, "device", "dev_other") }];
    const signedAt = Math.floor(Date.now() / 1000);
    const batch = { batchId: "cb_manualbatch000000000001", signedAt, indicators };
    const signed = { ...batch, signature: signBatch(CONSORTIUM_KEY, batch) };
    const path = "/api/v1/consortium/indicators";

    const first = await post<{ data: { accepted: number; duplicate: boolean } }>(hub, memberToken, path, signed);
    expect(first).toMatchObject({ status: 200, body: { data: { accepted: 1, duplicate: false } } });
    const again = await post<{ data: { accepted: number; duplicate: boolean } }>(hub, memberToken, path, signed);
    expect(again.body.data).toEqual({ accepted: 0, duplicate: true });
    // A batch id is its sender's: the same id from another account is that account's own batch, not a retry.
    const otherSender = hub.app.keys.issue({ accountId: hubMerchant.account.id, environment: "live", kind: "secret", permissions: ["consortium:write"], name: "merchant B feed" }).key;
    const fromOther = await post<{ data: { accepted: number; duplicate: boolean } }>(hub, otherSender, path, signed);
    expect(fromOther.body.data).toEqual({ accepted: 1, duplicate: false });

    // One indicator listed again in one batch is one report, not one per listing.
    const repeatedHash = hashIndicator(CONSORTIUM_KEY, "device", "dev_listed_twenty_times");
    const repeated = { batchId: "cb_manualbatch000000000010", signedAt, indicators: Array.from({ length: 20 }, () => ({ type: "device" as const, hash: repeatedHash })) };
    const once = await post<{ data: { accepted: number; duplicate: boolean } }>(hub, memberToken, path, { ...repeated, signature: signBatch(CONSORTIUM_KEY, repeated) });
    expect(once.body.data).toEqual({ accepted: 1, duplicate: false });
    expect(hub.app.db.prepare("SELECT reports FROM consortium_indicators WHERE hash = ?").get(repeatedHash)).toEqual({ reports: 1 });

    type ErrorBody = { error: { code: string } };
    const forged = await post<ErrorBody>(hub, memberToken, path, { ...signed, batchId: "cb_manualbatch000000000002", signature: signBatch("a key that is not the consortium's", batch) });
    expect(forged).toMatchObject({ status: 401, body: { error: { code: "UNAUTHORIZED" } } });
    const staleBatch = { ...batch, batchId: "cb_manualbatch000000000003", signedAt: signedAt - 3_600 };
    const stale = await post<ErrorBody>(hub, memberToken, path, { ...staleBatch, signature: signBatch(CONSORTIUM_KEY, staleBatch) });
    expect(stale.status).toBe(401);
    // The tolerance holds both ways: a batch signed an hour ahead of the hub's clock is refused too, and not stored.
    const futureBatch = { ...batch, batchId: "cb_manualbatch000000000004", signedAt: signedAt + 3_600 };
    const future = await post<ErrorBody>(hub, memberToken, path, { ...futureBatch, signature: signBatch(CONSORTIUM_KEY, futureBatch) });
    expect(future).toMatchObject({ status: 401, body: { error: { code: "UNAUTHORIZED" } } });
    expect(hub.app.db.prepare("SELECT COUNT(*) AS n FROM consortium_batches WHERE id = ?").get(futureBatch.batchId)).toEqual({ n: 0 });
    expect((await post<ErrorBody>(hub, hubOperator.keys.live.publishable, path, signed)).status).toBe(403);
    // A key of an account without a consortium key cannot feed one.
    const stranger = hub.createAccount("Stranger");
    expect((await post<ErrorBody>(hub, stranger.keys.live.secret, path, signed)).body.error.code).toBe("FORBIDDEN");
  });

  it("shows and removes a membership with fraudctl, never printing the key", async () => {
    const shown = await fraudctl(member, ["consortium", "show", "--account", memberMerchant.account.id, "--env", "live", "--json"]);
    expect(JSON.parse(shown)).toEqual({ member: true, sharing: true, shareUrl: `${hub.url}/api/v1/consortium/indicators` });
    expect(shown).not.toContain(CONSORTIUM_KEY);
    // A key too short is a wrong command line: exit 2, with the usage text.
    const malformed = await runFraudctl(["consortium", "set", "--account", memberMerchant.account.id, "--env", "live", "--key", "short"], { FRAUD_DATA_DIR: member.dataDir });
    expect(malformed.code).toBe(2);
    expect(malformed.stderr).toContain("at least 32 characters");
    expect(malformed.stderr).toContain("Usage:");
    // The test environment shares with a test key only: its labels must not reach the live consortium.
    const crossed = await runFraudctl(
      ["consortium", "set", "--account", memberMerchant.account.id, "--env", "test", "--key", CONSORTIUM_KEY, "--url", `${hub.url}/api/v1/consortium/indicators`, "--token", memberToken],
      { FRAUD_DATA_DIR: member.dataDir, FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" },
    );
    expect(crossed.code).toBe(1);
    expect(crossed.stderr).toContain("the token is a live key: the test environment shares with a test key only");
    expect((await runFraudctl(["consortium", "show", "--account", memberMerchant.account.id, "--env", "test", "--json"], { FRAUD_DATA_DIR: member.dataDir })).stdout).toContain('"member":false');
    await fraudctl(member, ["consortium", "disable", "--account", memberMerchant.account.id, "--env", "live"]);
    const labelled = await decide(member, memberMerchant.keys.live.secret, { ...fraudster, userId: "a_customer_10" });
    const { body } = await post<{ data: { consortiumShared: boolean } }>(member, memberMerchant.keys.live.secret, "/api/v1/feedback", { decisionId: labelled.decisionId, actualOutcome: "fraud" });
    expect(body.data.consortiumShared).toBe(false);
    const audit = member.app.db.prepare("SELECT body FROM audit_log WHERE action = 'consortium.updated'").all() as Array<{ body: string }>;
    expect(audit).toHaveLength(2);
    expect(audit.map((entry) => entry.body).join("")).not.toContain(CONSORTIUM_KEY);
  });
});

describe("a membership's share URL", () => {
  it("passes the webhook guard as a webhook's does when saved: a name that resolves to a private address is refused", async () => {
    const input = { key: CONSORTIUM_KEY, shareUrl: "https://hub.internal/api/v1/consortium/indicators", shareToken: "sk_live_token" };
    const toLoopback = async () => [{ address: "127.0.0.1", family: 4 }];
    const toPublic = async () => [{ address: "81.2.69.160", family: 4 }];
    expect((await membershipProblems(input, "live", { allowPrivate: false }, toLoopback)).join()).toMatch(/hub\.internal resolves to 127\.0\.0\.1/);
    expect(await membershipProblems(input, "live", { allowPrivate: false }, toPublic)).toEqual([]);
    expect(await membershipProblems(input, "live", { allowPrivate: true }, toLoopback)).toEqual([]);
  });

  it("refuses a token no HTTP header can carry, which would fail every share after being saved", async () => {
    const toPublic = async () => [{ address: "81.2.69.160", family: 4 }];
    const problems = (shareToken: string) =>
      membershipProblems({ key: CONSORTIUM_KEY, shareUrl: "https://hub.example.com/ingest", shareToken }, "live", { allowPrivate: false }, toPublic);
    for (const token of ["sk_live_token\r\nX-Injected: 1", "two words", "tökén", "x".repeat(513)]) {
      expect(await problems(token), JSON.stringify(token)).toEqual(["the token must be 1 to 512 printable ASCII characters without spaces (it is sent as an HTTP header)"]);
    }
    expect(await problems("sk_live_" + "a".repeat(32))).toEqual([]);
  });
});
