import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WebhookEvent } from "../src/webhooks/events.js";
import { ManualClock } from "./helpers/clock.js";
import { HUMAN_DESKTOP, UK_IP, botAttack } from "./helpers/inputs.js";
import { runBacktest } from "../src/decisions/backtest.js";
import { MAX_POLICIES } from "../src/services/policies.js";
import { MAX_LIST_ENTRIES, MAX_LISTS } from "../src/policies/index.js";
import { startTestServer, tempDir, type TestServer } from "./helpers/server.js";

const TOR_EXIT = "185.220.101.45";
const clock = new ManualClock();
let server: TestServer;
let key: string;
let acmeId: string;
/** The same account's test environment: its own policies. */
let testKey: string;
let otherKey: string;
const events: WebhookEvent[] = [];
let torDir: string;

interface PolicyJson { id: string; name: string; description: string; status: string; rules: Array<{ condition: string; action: string; description: string }>; actions: string[]; priority: number; version: number; builtIn: boolean }
interface ErrorJson { success: false; error: { code: string; message: string; details: { fieldViolations?: Array<{ field: string; description: string }> } } }

beforeAll(async () => {
  torDir = tempDir("tor-");
  fs.writeFileSync(path.join(torDir, "exits.txt"), `${TOR_EXIT}\n`);
  server = await startTestServer({ clock, config: { torExitListPath: path.join(torDir, "exits.txt") } });
  server.app.events.addSink({ wants: () => true, deliver: (_tenant, event) => {
    events.push(event);
  } });
  const acme = server.createAccount("Acme");
  acmeId = acme.account.id;
  key = acme.keys.live.secret;
  testKey = acme.keys.test.secret;
  otherKey = server.createAccount("Globex").keys.live.secret;
});
afterAll(async () => {
  await server.close();
  fs.rmSync(torDir, { recursive: true, force: true });
});

async function call<T>(method: string, path: string, body?: unknown, as = key): Promise<{ status: number; body: T; headers: Headers }> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { "content-type": "application/json", "x-api-key": as },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T, headers: res.headers };
}

async function decide(body: Record<string, unknown>) {
  const { body: res } = await call<{ data: { decision: string; score: number; reasons: string[]; evidenceId: string } }>("POST", "/api/v1/decide", body);
  const row = server.app.db.prepare("SELECT id, record FROM decisions WHERE evidence_id = ?").get(res.data.evidenceId) as { id: string; record: string };
  const record = JSON.parse(row.record) as { policyResults: Array<{ policyId: string; policyVersion: number; mode: string; matchedRule: number; action: string; error: string }> };
  return { ...res.data, id: row.id, policyResults: record.policyResults };
}

describe("policies", () => {
  it("lists the built-in 'Default Thresholds' policy as a bare object", async () => {
    const { status, body } = await call<{ policies: PolicyJson[] }>("GET", "/api/v1/policies");
    expect(status).toBe(200);
    expect(Object.keys(body)).toEqual(["policies"]);
    expect(body.policies).toHaveLength(1);
    expect(body.policies[0]).toMatchObject({
      name: "Default Thresholds",
      status: "active",
      builtIn: true,
      rules: [
        { condition: "score >= 70", action: "deny", description: "deny when score is at least 70" },
        { condition: "score >= 30 AND score < 70", action: "challenge", description: "challenge when score is at least 30 and below 70" },
      ],
    });
  });

  it("creates policies in the specification's documented forms, in shadow by default", async () => {
    const { status, body } = await call<PolicyJson>("POST", "/api/v1/policies", {
      name: "Mid band",
      description: "challenge the middle band",
      rules: [{ condition: "score >= 30 AND score < 70", action: "challenge" }, { condition: "signals.network.tor == true", action: "deny", description: "Tor" }],
      actions: ["login"],
      priority: 5,
    });
    expect(status).toBe(201);
    expect(body).toMatchObject({ name: "Mid band", status: "shadow", version: 1, builtIn: false, priority: 5, actions: ["login"] });
    expect(body.id).toMatch(/^pol_/);
    const listed = await call<{ policies: PolicyJson[] }>("GET", "/api/v1/policies");
    expect(listed.body.policies.map((p) => p.name)).toEqual(["Mid band", "Default Thresholds"]);
    const got = await call<PolicyJson>("GET", `/api/v1/policies/${body.id}`);
    expect(got.body).toEqual(body);
    expect((await call("GET", `/api/v1/policies/${body.id}`, undefined, otherKey)).status).toBe(404);
  });

  it("refuses conditions that do not compile, name unknown variables or have the wrong type, naming rule and position", async () => {
    const cases = [
      { condition: "signals.network.torr == true", field: "rules[0].condition", text: /rule 0 at 1:\d+: .*torr/ },
      { condition: 'score == "high"', field: "rules[0].condition", text: /rule 0 at 1:\d+/ },
      { condition: "score >= ", field: "rules[0].condition", text: /rule 0 at 1:\d+/ },
      { condition: "nobody > 3", field: "rules[0].condition", text: /nobody/ },
      // Errors without a position are still the condition's.
      { condition: `${"(".repeat(2000)}true${")".repeat(2000)}`, field: "rules[0].condition", text: /nested too deeply/ },
      { condition: `score${"+1".repeat(2000)} > 0`, field: "rules[0].condition", text: /nested too deeply/ },
      // Refused before it is parsed: 2,000 links took a fifth of a second on the thread every account shares.
      { condition: `metadata${".a".repeat(2000)} == 1`, field: "rules[0].condition", text: /^rule 0 at 1:73: more than 32 field selections and indexes in a row/ },
      { condition: "'\\ud800' == userId", field: "rules[0].condition", text: /surrogate/ },
      { condition: "[1,2].all(a, [3].exists(b, b == a))", field: "rules[0].condition", text: /cannot be nested/ },
    ];
    for (const bad of cases) {
      const { status, body } = await call<ErrorJson>("POST", "/api/v1/policies", { name: "bad", rules: [{ condition: bad.condition, action: "deny" }] });
      expect(status, bad.condition).toBe(400);
      expect(body.error.code).toBe("VALIDATION_ERROR");
      expect(body.error.details.fieldViolations?.[0]?.field).toBe(bad.field);
      expect(body.error.details.fieldViolations?.[0]?.description).toMatch(bad.text);
    }
    // A draft backtest compiles on the same thread, and is refused alike.
    const draft = await call<ErrorJson>("POST", "/api/v1/policies/backtest", { rules: [{ condition: `metadata${'["a"]'.repeat(800)} == 1`, action: "deny" }] });
    expect(draft.status).toBe(400);
    expect(draft.body.error.code).toBe("VALIDATION_ERROR");
    expect(draft.body.error.details.fieldViolations).toEqual([
      { field: "rules[0].condition", description: "rule 0 at 1:169: more than 32 field selections and indexes in a row (a.b.c…, a[0][1]…), the most a condition may chain" },
    ]);
    const badAction = await call<ErrorJson>("POST", "/api/v1/policies", { name: "bad", rules: [{ condition: "true", action: "explode" }] });
    expect(badAction.status).toBe(400);
    expect(badAction.body.error.details.fieldViolations?.[0]?.field).toBe("rules[0].action");
  });

  it("versions every change and protects the built-in policy", async () => {
    const created = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "v", rules: [{ condition: "score > 99", action: "deny" }] })).body;
    const updated = await call<PolicyJson>("PUT", `/api/v1/policies/${created.id}`, { name: "v2", status: "disabled", rules: [{ condition: "score > 98", action: "deny" }] });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ name: "v2", version: 2, status: "disabled" });
    const versions = server.app.db.prepare("SELECT version FROM policy_versions WHERE policy_id = ? ORDER BY version").all(created.id) as Array<{ version: number }>;
    expect(versions.map((v) => v.version)).toEqual([1, 2]);
    expect((await call("DELETE", `/api/v1/policies/${created.id}`)).status).toBe(204);
    expect((await call("GET", `/api/v1/policies/${created.id}`)).status).toBe(404);
    expect((await call<ErrorJson>("DELETE", "/api/v1/policies/pol_default_thresholds")).status).toBe(409);
    expect((await call<ErrorJson>("PUT", "/api/v1/policies/pol_default_thresholds", { name: "x", rules: [{ condition: "true", action: "allow" }] })).status).toBe(409);
    // Nor can another policy take its name, to be listed beside it.
    for (const name of ["Default Thresholds", "Default Thresholds ", "default  thresholds", "ＤＥＦＡＵＬＴ Thresholds", "Default\u200b Thresholds", "\u200eDefault Thresholds\u2060", "Default Thresholds\u034f", "Default\ufe0f Thresholds", "Default\u3164Thresholds", "Default\u2800Thresholds",
      // Without its space, or with one that shows nothing, the name reads the same in a listing.
      "DefaultThresholds", "Default\u200bThresholds", "Default\u00adThresholds", "\u00a0Default\u3000Thresholds\u202f", "ＤｅｆａｕｌｔＴｈｒｅｓｈｏｌｄｓ", "Default\u180eThre\u017fholds"]) {
      const namesake = await call<ErrorJson>("POST", "/api/v1/policies", { name, rules: [{ condition: "score > 99", action: "deny" }] });
      expect(namesake.status, name).toBe(400);
      expect(namesake.body.error.details.fieldViolations).toEqual([{ field: "name", description: "is the built-in policy's name" }]);
    }
    for (const name of ["Default Thresholds v2", "Default-Thresholds"]) expect((await call("POST", "/api/v1/policies", { name, rules: [{ condition: "score > 99", action: "deny" }] })).status, name).toBe(201);
    // A name is one line of text.
    for (const name of ["a\u0000b", "two\nlines", "tab\there", "first\u2028second"]) {
      const refused = await call<ErrorJson>("POST", "/api/v1/policies", { name, rules: [{ condition: "score > 99", action: "deny" }] });
      expect(refused.status, name).toBe(400);
      expect(refused.body.error.details.fieldViolations?.[0]).toMatchObject({ field: "name", description: expect.stringMatching(/^must be one line of text: it holds the (control character U\+(0000|000A|0009)|line separator U\+2028)$/) });
    }
  });

  it("takes back what GET answered without its read-only fields, and gives every field a PUT leaves out its default (docs/policies.md)", async () => {
    const full = { name: "Round trip", description: "kept", status: "active", priority: 7, actions: ["login"], rules: [{ condition: "score > 99", action: "deny", description: "top" }] };
    const created = (await call<PolicyJson>("POST", "/api/v1/policies", full)).body;
    const read = (await call<PolicyJson & { createdAt: string; updatedAt: string }>("GET", `/api/v1/policies/${created.id}`)).body;
    const sentBack = await call<ErrorJson>("PUT", `/api/v1/policies/${created.id}`, read);
    expect(sentBack.status).toBe(400);
    expect(sentBack.body.error.details.fieldViolations?.map((v) => v.field)).toEqual(["builtIn", "createdAt", "updatedAt"]);
    const { builtIn: _builtIn, createdAt: _createdAt, updatedAt: _updatedAt, ...writable } = read;
    expect((await call<PolicyJson>("PUT", `/api/v1/policies/${created.id}`, writable)).body).toMatchObject({ ...full, version: 2 });
    // Left out is the default, not what the policy had.
    expect((await call<PolicyJson>("PUT", `/api/v1/policies/${created.id}`, { name: full.name, rules: [{ condition: "score > 99", action: "deny" }] })).body).toMatchObject({
      description: "",
      status: "shadow",
      priority: 0,
      actions: [],
      rules: [{ condition: "score > 99", action: "deny", description: "" }],
      version: 3,
    });
  });

  it("refuses an update made from a version that is no longer current with 409, saving nothing", async () => {
    const created = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "shared", rules: [{ condition: "score > 99", action: "deny" }] })).body;
    const rules = [{ condition: "score > 99", action: "deny" }, { condition: "signals.network.tor", action: "deny" }];
    // Two people read version 1; the first saves it as version 2.
    expect((await call<PolicyJson>("PUT", `/api/v1/policies/${created.id}`, { name: "shared", rules, version: 1 })).body).toMatchObject({ version: 2 });
    const stale = await call<ErrorJson>("PUT", `/api/v1/policies/${created.id}`, { name: "shared", priority: 200, rules: rules.slice(0, 1), version: 1 });
    expect(stale.status).toBe(409);
    expect(stale.body.error).toMatchObject({ code: "CONFLICT", message: `policy ${created.id} is at version 2, not 1: it was saved since; read it again and apply your change to that version` });
    expect((await call<PolicyJson>("GET", `/api/v1/policies/${created.id}`)).body).toMatchObject({ version: 2, priority: 0, rules });
    // A version it never reached was not saved since: the answer says so, and saves nothing either.
    const ahead = await call<ErrorJson>("PUT", `/api/v1/policies/${created.id}`, { name: "shared", priority: 200, rules, version: 5 });
    expect(ahead.status).toBe(409);
    expect(ahead.body.error).toMatchObject({ code: "CONFLICT", message: `policy ${created.id} is at version 2, not 5: it has no version 5 yet; read it again and apply your change to that version` });
    expect((await call<PolicyJson>("GET", `/api/v1/policies/${created.id}`)).body).toMatchObject({ version: 2, priority: 0 });
    // Made from the current version, or without saying which, the update goes through.
    expect((await call<PolicyJson>("PUT", `/api/v1/policies/${created.id}`, { name: "shared", priority: 200, rules, version: 2 })).body).toMatchObject({ version: 3, priority: 200 });
    expect((await call<PolicyJson>("PUT", `/api/v1/policies/${created.id}`, { name: "shared", rules })).body).toMatchObject({ version: 4, priority: 0 });
    const invalid = await call<ErrorJson>("PUT", `/api/v1/policies/${created.id}`, { name: "shared", rules, version: 0 });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.details.fieldViolations?.[0]?.field).toBe("version");
  });
});

describe("policies acting on decisions", () => {
  let torPolicy: PolicyJson;

  it("records shadow results without changing the decision, in the record, the decision event and policy.triggered", async () => {
    torPolicy = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "Tor allowed for logins", status: "shadow", priority: 50, actions: ["login"], rules: [{ condition: "signals.network.tor == true", action: "allow", description: "trust Tor logins" }] })).body;
    const result = await decide({ userId: "tor_user", action: "login", ip: TOR_EXIT, ...HUMAN_DESKTOP });
    expect(result.reasons).toContain("TOR_EXIT");
    const shadow = result.policyResults.find((r) => r.policyId === torPolicy.id);
    expect(shadow).toMatchObject({ mode: "shadow", matchedRule: 0, action: "allow", policyVersion: 1 });
    const defaultResult = result.policyResults.find((r) => r.policyId === "pol_default_thresholds");
    expect(defaultResult?.mode).toBe("active");
    await server.app.settled();
    const triggered = events.filter((e) => e.type === "policy.triggered" && (e.data as { decisionId: string }).decisionId === result.id);
    expect(triggered.find((e) => (e.data as { policyId: string }).policyId === torPolicy.id)?.data).toMatchObject({ policyStatus: "shadow", applied: false, ruleIndex: 0 });
    const decisionEvent = events.find((e) => e.type.startsWith("decision.") && (e.data as { decisionId: string }).decisionId === result.id);
    expect((decisionEvent?.data as { shadowResults: Array<{ policyId: string; decision: string }> }).shadowResults).toContainEqual(expect.objectContaining({ policyId: torPolicy.id, decision: "allow", matchedRules: [0] }));
  });

  it("lets the first matching rule of the highest-priority active policy decide, scoped to its actions", async () => {
    const denyTor = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "Deny Tor signups", status: "active", priority: 10, actions: ["signup"], rules: [{ condition: "signals.network.tor == true", action: "deny" }] })).body;
    const signup = await decide({ userId: "tor_signup", action: "signup", ip: TOR_EXIT, ...HUMAN_DESKTOP });
    expect(signup.decision).toBe("deny");
    // The answer says a policy decided, ahead of the signals behind it.
    expect(signup.reasons[0]).toBe("POLICY_DENY");
    expect(signup.reasons).toContain("TOR_EXIT");
    expect(signup.policyResults.find((r) => r.policyId === denyTor.id)).toMatchObject({ mode: "active", matchedRule: 0, action: "deny" });
    // Not in scope for logins: the policy is not evaluated at all.
    const login = await decide({ userId: "tor_login", action: "login", ip: TOR_EXIT, ...HUMAN_DESKTOP });
    expect(login.policyResults.some((r) => r.policyId === denyTor.id)).toBe(false);
  });

  it("lets an allow-list rule override a high score, with lookups in named lists", async () => {
    // PUT creates the list (201), then changes it (200); its body is the list either way.
    expect((await call("PUT", "/api/v1/lists/vip_users", { kind: "user", type: "allow", description: "known good" })).status).toBe(201);
    const changed = await call<{ data: Record<string, unknown> }>("PUT", "/api/v1/lists/vip_users", { kind: "user", type: "allow", description: "known good customers" });
    expect(changed.status).toBe(200);
    expect(changed.body.data).toMatchObject({ name: "vip_users", description: "known good customers" });
    expect(changed.body.data).not.toHaveProperty("created");
    // Connect (and gRPC) callers read it in the response: 200 either way, as RPCs answer.
    const overConnect = async (name: string) => {
      const res = await fetch(`${server.url}/fraud.v1.ListService/PutList`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": key },
        body: JSON.stringify({ name, kind: "user", type: "allow" }),
      });
      return { status: res.status, created: ((await res.json()) as { created: boolean }).created };
    };
    expect(await overConnect("vip_users_connect")).toEqual({ status: 200, created: true });
    expect(await overConnect("vip_users_connect")).toEqual({ status: 200, created: false });
    const added = await call<{ data: { added: number; updated: number } }>("POST", "/api/v1/lists/vip_users/entries", { entries: [{ value: "vip_1" }] });
    expect(added.body.data).toEqual({ added: 1, updated: 0 });
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "VIPs", status: "active", priority: 100, rules: [{ condition: "userId in lists.vip_users", action: "allow" }] });
    const vip = await decide({ userId: "vip_1", action: "checkout", ...botAttack(TOR_EXIT) });
    expect(vip.score).toBeGreaterThanOrEqual(80);
    expect(vip.decision).toBe("allow");
    expect(vip.reasons[0]).toBe("POLICY_ALLOW");
    expect(vip.reasons).toContain("TOR_EXIT");
    const other = await decide({ userId: "not_vip", action: "checkout", ...botAttack(TOR_EXIT) });
    expect(other.decision).toBe("deny");
  });

  it("never gives LOW_RISK for a request a policy challenged or denied", async () => {
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "Large custom transfers", status: "active", priority: 95, actions: ["custom"], rules: [{ condition: "amount > 1000", action: "deny" }] });
    const clean = { userId: "quiet_user", action: "custom", ip: "81.2.69.160", ...HUMAN_DESKTOP };
    const small = await decide({ ...clean, amount: 10, currency: "EUR" });
    expect(small).toMatchObject({ decision: "allow", reasons: ["LOW_RISK"] });
    const large = await decide({ ...clean, amount: 5000, currency: "EUR" });
    expect(large.decision).toBe("deny");
    expect(large.reasons[0]).toBe("POLICY_DENY");
    expect(large.reasons).not.toContain("LOW_RISK");
    // The record and the evidence say the same.
    const stored = server.app.db.prepare("SELECT e.content FROM decisions d JOIN evidence e ON e.id = d.evidence_id WHERE d.id = ?").get(large.id) as { content: string };
    expect((JSON.parse(stored.content) as { reasons: string[] }).reasons).toEqual(large.reasons);
  });

  it("apply to analyze too: its active rules decide, over the fast path's signals; shadow ones are not tried", async () => {
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "Edge block", status: "active", priority: 97, actions: ["password_change"], rules: [{ condition: "userId == 'blocked_at_edge'", action: "deny" }] });
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "Edge shadow", status: "shadow", priority: 98, actions: ["password_change"], rules: [{ condition: "true", action: "deny" }] });
    const analyze = async (userId: string) => {
      const { status, body } = await call<{ decision: string; riskLevel: string; hasElevatedRisk: boolean; riskReasons: string[] }>("POST", "/api/v1/analyze", { userId, action: "password_change", ip: "81.2.69.160", ...HUMAN_DESKTOP });
      expect(status).toBe(200);
      return body;
    };
    expect(await analyze("blocked_at_edge")).toMatchObject({ decision: "deny", riskLevel: "low", hasElevatedRisk: true, riskReasons: ["POLICY_DENY"] });
    expect(await analyze("someone_else")).toMatchObject({ decision: "allow", riskLevel: "low", hasElevatedRisk: false, riskReasons: [] });

    // A rule that reads the signals sees the fast path's (analyze asks the engine for them only when the
    // account has active policies of its own).
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "Edge agents", status: "active", priority: 96, actions: ["password_change"], rules: [{ condition: "signals.userAgent.present == false", action: "challenge" }] });
    const { status, body } = await call<{ decision: string; riskReasons: string[] }>("POST", "/api/v1/analyze", { userId: "no_agent", action: "password_change", ip: "81.2.69.160" });
    expect(status).toBe(200);
    expect(body).toMatchObject({ decision: "challenge", riskReasons: expect.arrayContaining(["POLICY_CHALLENGE"]) as unknown });
    expect(await analyze("someone_else")).toMatchObject({ decision: "allow" });
  });

  it("matches IP lists by CIDR range, honours entry expiry, and feeds deny lists to the engine", async () => {
    await call("PUT", "/api/v1/lists/blocked_ips", { kind: "ip", type: "deny" });
    const expiresAt = new Date(clock.now() + 60_000).toISOString();
    await call("POST", "/api/v1/lists/blocked_ips/entries", { entries: [{ value: "81.2.69.0/24", expiresAt }, { value: "2a00:1450::/32" }] });
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "Blocked networks", status: "active", priority: 90, rules: [{ condition: "ip in lists.blocked_ips", action: "deny" }] });
    const blocked = await decide({ userId: "net_user", action: "login", ip: "81.2.69.200", ...HUMAN_DESKTOP });
    expect(blocked.decision).toBe("deny");
    expect(blocked.reasons).toContain("DENYLISTED");
    clock.advance(61_000);
    const expired = await decide({ userId: "net_user2", action: "login", ip: "81.2.69.200", ...HUMAN_DESKTOP });
    expect(expired.decision).toBe("allow");
    const v6 = await decide({ userId: "net_user3", action: "login", ip: "2a00:1450:4001::1", ...HUMAN_DESKTOP });
    expect(v6.decision).toBe("deny");
    const list = await call<{ data: { list: { entryCount: number }; entries: Array<{ value: string }> } }>("GET", "/api/v1/lists/blocked_ips");
    expect(list.body.data.list.entryCount).toBe(1);
    expect(list.body.data.entries.map((e) => e.value)).toEqual(["2a00:1450::/32"]);
    const bad = await call<ErrorJson>("POST", "/api/v1/lists/blocked_ips/entries", { entries: [{ value: "999.1.1.1" }] });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details.fieldViolations?.[0]?.field).toBe("entries[0].value");
    expect((await call("PUT", "/api/v1/lists/blocked_ips", { kind: "user", type: "deny" })).status).toBe(409);
    await call("POST", "/api/v1/lists/blocked_ips/remove", { values: ["2a00:1450::/32"] });
    const cleared = await decide({ userId: "net_user4", action: "login", ip: "2a00:1450:4001::1", ...HUMAN_DESKTOP });
    expect(cleared.decision).toBe("allow");
  });

  it("counts an expired entry added again as added, and decides by it at once", async () => {
    // An account of its own: the backtests below replay the main account's decisions.
    const owner = server.createAccount("Returning").keys.live.secret;
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, owner);
    const decision = async (userId: string) =>
      (await as<{ data: { decision: string; reasons: string[] } }>("POST", "/api/v1/decide", { userId, action: "login", ip: "81.2.70.9", ...HUMAN_DESKTOP })).body.data;
    await as("PUT", "/api/v1/lists/returning_ips", { kind: "ip", type: "deny" });
    await as<PolicyJson>("POST", "/api/v1/policies", { name: "Returning networks", status: "active", priority: 90, rules: [{ condition: "ip in lists.returning_ips", action: "deny" }] });
    const entry = { value: "81.2.70.0/24", expiresAt: new Date(clock.now() + 60_000).toISOString() };
    expect((await as<{ data: { added: number; updated: number } }>("POST", "/api/v1/lists/returning_ips/entries", { entries: [entry] })).body.data).toEqual({ added: 1, updated: 0 });
    expect((await as<{ data: { added: number; updated: number } }>("POST", "/api/v1/lists/returning_ips/entries", { entries: [entry] })).body.data).toEqual({ added: 0, updated: 1 });
    clock.advance(61_000);
    expect((await decision("back_user")).decision).toBe("allow");
    // Expired, not yet pruned: it counted for nothing, so adding it again adds it.
    const again = await as<{ data: { added: number; updated: number } }>("POST", "/api/v1/lists/returning_ips/entries", { entries: [{ value: "81.2.70.0/24" }] });
    expect(again.body.data).toEqual({ added: 1, updated: 0 });
    const list = await as<{ data: { list: { entryCount: number } } }>("GET", "/api/v1/lists/returning_ips");
    expect(list.body.data.list.entryCount).toBe(1);
    const denied = await decision("back_user2");
    expect(denied.decision).toBe("deny");
    expect(denied.reasons).toContain("DENYLISTED");
  });

  it("records a rule that fails at evaluation time as an error and never fails the decision", async () => {
    const failing = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "Gold tier", status: "shadow", rules: [{ condition: 'metadata.tier == "gold"', action: "allow" }] })).body;
    const result = await decide({ userId: "meta_user", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    const entry = result.policyResults.find((r) => r.policyId === failing.id);
    expect(entry?.matchedRule).toBe(-1);
    expect(entry?.error).toMatch(/rule 0: .*tier/);
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).toMatch(/fraud_policy_rule_errors_total\{kind="evaluation"\} [1-9]/);
  });

  it("skips a stored policy that no longer compiles, says so once per rebuild, and decides without it", async () => {
    const legacyKey = server.createAccount("Legacy").keys.live.secret;
    const legacy = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "Deny Tor", status: "active", priority: 5, rules: [{ condition: "signals.network.tor == true", action: "deny" }] }, legacyKey)).body;
    // As if saved before nested comprehensions were refused: the row holds a condition today's checker rejects.
    const row = server.app.db.prepare("SELECT rules FROM policies WHERE id = ?").get(legacy.id) as { rules: string };
    const rules = JSON.parse(row.rules) as Array<{ condition: string }>;
    rules[0] = { ...rules[0], condition: "[1, 2].all(a, [3].exists(b, b == a)) || signals.network.tor == true" };
    server.app.db.prepare("UPDATE policies SET rules = ? WHERE id = ?").run(JSON.stringify(rules), legacy.id);

    const decideAsLegacy = async (userId: string) => {
      const { status, body } = await call<{ data: { decision: string; evidenceId: string } }>("POST", "/api/v1/decide", { userId, action: "login", ip: TOR_EXIT, ...HUMAN_DESKTOP }, legacyKey);
      expect(status).toBe(200);
      const stored = server.app.db.prepare("SELECT record FROM decisions WHERE evidence_id = ?").get(body.data.evidenceId) as { record: string };
      return (JSON.parse(stored.record) as { policyResults: Array<{ policyId: string }> }).policyResults.map((r) => r.policyId);
    };
    expect(await decideAsLegacy("legacy_1")).not.toContain(legacy.id);
    expect(await decideAsLegacy("legacy_2")).not.toContain(legacy.id);

    const warnings = server.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.policyId === legacy.id);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: "warn", version: legacy.version, name: "Deny Tor", errors: expect.stringMatching(/cannot be nested/) });
    const metrics = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(metrics).toMatch(/fraud_policies_skipped_total\{kind="compile"\} 1/);
    // A disabled policy is not compiled at all, so the same broken condition there is never reported.
    const dormant = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "Dormant", status: "disabled", rules: [{ condition: "score > 1", action: "deny" }] }, legacyKey)).body;
    server.app.db.prepare("UPDATE policies SET rules = ? WHERE id = ?").run(JSON.stringify(rules), dormant.id);
    await decideAsLegacy("legacy_3");
    expect(server.logs.some((line) => (JSON.parse(line) as Record<string, unknown>).policyId === dormant.id)).toBe(false);

    // A backtest leaves it out as live decisions do, and says so.
    const draft = await call<{ data: { evaluated: number; skippedPolicies: Array<{ policyId: string; name: string; version: number; errors: string }> } }>(
      "POST", "/api/v1/policies/backtest", { rules: [{ condition: "score >= 90", action: "deny" }], window: { from: new Date(clock.now() - 3_600_000).toISOString(), to: new Date(clock.now() + 1000).toISOString() } }, legacyKey,
    );
    expect(draft.status).toBe(200);
    expect(draft.body.data.evaluated).toBe(3);
    expect(draft.body.data.skippedPolicies).toEqual([{ policyId: legacy.id, name: "Deny Tor", version: legacy.version, errors: expect.stringMatching(/cannot be nested/) }]);
  });

  it("backtests with the live evaluation code, so a replay agrees with what happened live", async () => {
    // The Tor shadow policy matched live on Tor logins; replayed, it matches the same decisions and would change them to allow.
    const replay = await call<{ data: { evaluated: number; changed: number; matched: number; transitions: Array<{ from: string; to: string; count: number }>; examples: Array<{ decisionId: string; to: string }> } }>("POST", `/api/v1/policies/${torPolicy.id}/backtest`, { window: { from: new Date(clock.now() - 3_600_000).toISOString(), to: new Date(clock.now() + 1000).toISOString() } });
    expect(replay.status).toBe(200);
    const liveMatches = (server.app.db.prepare("SELECT record FROM decisions").all() as Array<{ record: string }>)
      .filter((row) => (JSON.parse(row.record) as { policyResults: Array<{ policyId: string; matchedRule: number }> }).policyResults.some((r) => r.policyId === torPolicy.id && r.matchedRule >= 0)).length;
    expect(replay.body.data.matched).toBe(liveMatches);
    expect(replay.body.data.evaluated).toBeGreaterThan(replay.body.data.matched);
    // Every Tor login it matched had been challenged, and would have been allowed.
    expect(replay.body.data.changed).toBe(replay.body.data.matched);
    expect(replay.body.data.transitions).toEqual([{ from: "challenge", to: "allow", count: liveMatches }]);
    // Make it active: new decisions follow it, and replaying it over them changes nothing.
    await call("PUT", `/api/v1/policies/${torPolicy.id}`, { name: torPolicy.name, status: "active", priority: 50, actions: ["login"], rules: torPolicy.rules });
    clock.advance(1000);
    const since = clock.now();
    for (let i = 0; i < 3; i++) expect((await decide({ userId: `after_${i}`, action: "login", ip: TOR_EXIT, ...HUMAN_DESKTOP })).decision).toBe("allow");
    const agree = await call<{ data: { evaluated: number; changed: number } }>("POST", `/api/v1/policies/${torPolicy.id}/backtest`, { window: { from: new Date(since).toISOString(), to: new Date(clock.now() + 1).toISOString() } });
    expect(agree.body.data).toMatchObject({ evaluated: 3, changed: 0 });
  });

  it("stops a backtest at its time limit and says how far it got", () => {
    const task = {
      tenant: { accountId: acmeId, environment: "live" as const },
      candidate: { id: "pol_draft", version: 1, status: "active", priority: 1000, actions: [], rules: [{ condition: "score >= 10", action: "deny" }] },
      fromMs: 0,
      toMs: clock.now() + 1000,
      maxDecisions: 100_000,
      maxExamples: 5,
      nowMs: clock.now(),
    };
    const whole = runBacktest(server.app.db, { ...task, timeLimitMs: 60_000 });
    expect(whole.evaluated).toBeGreaterThan(0);
    expect(whole.timeLimitReached).toBe(false);
    const cut = runBacktest(server.app.db, { ...task, timeLimitMs: -1 });
    expect(cut).toMatchObject({ evaluated: 0, changed: 0, timeLimitReached: true });
  });

  it("backtests a draft without saving it, and validates the window", async () => {
    const draft = await call<{ data: { evaluated: number; changed: number; transitions: Array<{ from: string; to: string; count: number }> } }>("POST", "/api/v1/policies/backtest", { name: "draft", rules: [{ condition: "score >= 10", action: "deny" }], priority: 1000, window: { from: new Date(clock.now() - 86_400_000).toISOString() } });
    expect(draft.status).toBe(200);
    expect(draft.body.data.evaluated).toBeGreaterThan(0);
    // Allowed and challenged decisions of score 10 and more alike would have been denied.
    const { transitions } = draft.body.data;
    expect(transitions.map((t) => t.from).sort()).toEqual(["allow", "challenge"]);
    expect(transitions.every((t) => t.to === "deny" && t.count > 0)).toBe(true);
    expect(transitions.reduce((sum, t) => sum + t.count, 0)).toBe(draft.body.data.changed);
    const before = (await call<{ policies: PolicyJson[] }>("GET", "/api/v1/policies")).body.policies.length;
    expect(before).toBeGreaterThan(1);
    expect((await call<{ policies: PolicyJson[] }>("GET", "/api/v1/policies")).body.policies.some((p) => p.name === "draft")).toBe(false);
    const backwards = await call<ErrorJson>("POST", "/api/v1/policies/backtest", { rules: [{ condition: "true", action: "deny" }], window: { from: new Date(clock.now()).toISOString(), to: new Date(clock.now() - 1000).toISOString() } });
    expect(backwards.status).toBe(400);
    expect((await call<ErrorJson>("POST", "/api/v1/policies/pol_nope/backtest", {})).status).toBe(404);
  });
});

describe("policy versions", () => {
  it("shows a policy as it was at each version, after later changes and after its deletion", async () => {
    const first = await call<PolicyJson>("POST", "/api/v1/policies", { name: "Versioned", status: "shadow", rules: [{ condition: "score > 90", action: "deny" }] });
    const id = first.body.id;
    const second = await call<PolicyJson>("PUT", `/api/v1/policies/${id}`, { name: "Versioned", status: "active", rules: [{ condition: "score > 80", action: "deny" }] });
    expect(second.body.version).toBe(2);
    const v1 = await call<PolicyJson>("GET", `/api/v1/policies/${id}/versions/1`);
    expect(v1).toMatchObject({ status: 200, body: { id, version: 1, status: "shadow", rules: [{ condition: "score > 90", action: "deny" }] } });
    expect((await call<PolicyJson>("GET", `/api/v1/policies/${id}/versions/2`)).body).toMatchObject({ version: 2, status: "active" });
    expect((await call("DELETE", `/api/v1/policies/${id}`)).status).toBe(204);
    expect((await call<PolicyJson>("GET", `/api/v1/policies/${id}/versions/2`)).body.rules[0]?.condition).toBe("score > 80");
    // The built-in policy's one version; unknown versions, other accounts and bad numbers.
    expect((await call<PolicyJson>("GET", "/api/v1/policies/pol_default_thresholds/versions/1")).body.builtIn).toBe(true);
    expect((await call<ErrorJson>("GET", `/api/v1/policies/${id}/versions/3`)).body.error).toMatchObject({ code: "NOT_FOUND", message: `no version 3 of policy ${id}` });
    expect((await call<ErrorJson>("GET", `/api/v1/policies/${id}/versions/1`, undefined, otherKey)).status).toBe(404);
    expect((await call<ErrorJson>("GET", `/api/v1/policies/${id}/versions/1`, undefined, testKey)).status).toBe(404);
    const notNumber = await call<ErrorJson>("GET", `/api/v1/policies/${id}/versions/first`);
    expect(notNumber.status).toBe(400);
    expect(notNumber.body.error.message).toBe("path parameter version must be a whole number in decimal digits");
    const zero = await call<ErrorJson>("GET", `/api/v1/policies/${id}/versions/0`);
    expect(zero.status).toBe(400);
    expect(zero.body.error.message).toBe("invalid request: version must be at least 1");
  });
});

describe("list changes", () => {
  it("take effect on the very next decide, after a decide has cached the account's policy set", async () => {
    const owner = server.createAccount("List changes").keys.live.secret;
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, owner);
    let n = 0;
    const reasonsFor = async (userId: string) => {
      const { status, body } = await as<{ data: { reasons: string[] } }>("POST", "/api/v1/decide", { userId, action: "login", ip: UK_IP, deviceId: `dev_${n++}`, ...HUMAN_DESKTOP });
      expect(status).toBe(200);
      return body.data.reasons;
    };
    expect((await as("PUT", "/api/v1/lists/blocked_users", { kind: "user", type: "deny" })).status).toBe(201);
    // This decide builds and caches the account's policy set, with the list still empty.
    expect(await reasonsFor("mallory")).not.toContain("DENYLISTED");

    expect((await as("POST", "/api/v1/lists/blocked_users/entries", { entries: [{ value: "mallory" }] })).status).toBe(200);
    expect(await reasonsFor("mallory")).toContain("DENYLISTED");

    expect((await as<{ data: { removed: number } }>("POST", "/api/v1/lists/blocked_users/remove", { values: ["mallory"] })).body.data.removed).toBe(1);
    expect(await reasonsFor("mallory")).not.toContain("DENYLISTED");

    expect((await as("POST", "/api/v1/lists/blocked_users/entries", { entries: [{ value: "mallory" }] })).status).toBe(200);
    expect(await reasonsFor("mallory")).toContain("DENYLISTED");

    // Made an allow list, it no longer denies; made a deny list again, it does.
    expect((await as("PUT", "/api/v1/lists/blocked_users", { kind: "user", type: "allow" })).status).toBe(200);
    expect(await reasonsFor("mallory")).not.toContain("DENYLISTED");
    expect((await as("PUT", "/api/v1/lists/blocked_users", { kind: "user", type: "deny" })).status).toBe(200);
    expect(await reasonsFor("mallory")).toContain("DENYLISTED");

    expect((await as("DELETE", "/api/v1/lists/blocked_users")).status).toBe(204);
    expect(await reasonsFor("mallory")).not.toContain("DENYLISTED");
  });

  it("keep one entry per entity: a range of one address is the address, a user id is kept as decide compares it", async () => {
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, testKey);
    const entriesOf = async (name: string) => (await as<{ data: { entries: Array<{ value: string }> } }>("GET", `/api/v1/lists/${name}`)).body.data.entries.map((entry) => entry.value);
    expect((await as("PUT", "/api/v1/lists/host_ips", { kind: "ip", type: "deny" })).status).toBe(201);
    const added = await as<{ data: { added: number; updated: number } }>("POST", "/api/v1/lists/host_ips/entries", {
      entries: [{ value: "81.2.69.161/32" }, { value: "81.2.69.161" }, { value: "::ffff:81.2.69.162/128" }, { value: "2a02:c7f:8::1/128" }],
    });
    expect(added.body.data).toEqual({ added: 3, updated: 1 });
    expect((await entriesOf("host_ips")).sort()).toEqual(["2a02:c7f:8::1", "81.2.69.161", "81.2.69.162"]);
    // Removed by either spelling.
    expect((await as<{ data: { removed: number } }>("POST", "/api/v1/lists/host_ips/remove", { values: ["81.2.69.161", "81.2.69.162/32"] })).body.data.removed).toBe(2);
    expect(await entriesOf("host_ips")).toEqual(["2a02:c7f:8::1"]);
    // A NAT64 address is its IPv4 client: one entry, shown and removed as the IPv4 address, and the client is
    // unblocked once it is removed, whichever way it reaches the service.
    const nat64 = await as<{ data: { added: number; updated: number } }>("POST", "/api/v1/lists/host_ips/entries", { entries: [{ value: "81.2.69.163" }, { value: "64:ff9b::81.2.69.163" }] });
    expect(nat64.body.data).toEqual({ added: 1, updated: 1 });
    expect((await entriesOf("host_ips")).sort()).toEqual(["2a02:c7f:8::1", "81.2.69.163"]);
    expect((await as<{ data: { removed: number } }>("POST", "/api/v1/lists/host_ips/remove", { values: ["64:ff9b::5102:45a3"] })).body.data.removed).toBe(1);
    expect(await entriesOf("host_ips")).toEqual(["2a02:c7f:8::1"]);

    // A user id with spaces is another user id: stored and matched exactly, as decide takes it.
    expect((await as("PUT", "/api/v1/lists/spaced_users", { kind: "user", type: "deny" })).status).toBe(201);
    expect((await as("POST", "/api/v1/lists/spaced_users/entries", { entries: [{ value: " alice " }] })).status).toBe(200);
    expect(await entriesOf("spaced_users")).toEqual([" alice "]);
    const reasonsOf = async (userId: string) => (await as<{ data: { reasons: string[] } }>("POST", "/api/v1/decide", { userId, action: "login", ip: UK_IP })).body.data.reasons;
    expect(await reasonsOf(" alice ")).toContain("DENYLISTED");
    expect(await reasonsOf("alice")).not.toContain("DENYLISTED");
    const blank = await as<ErrorJson>("POST", "/api/v1/lists/spaced_users/entries", { entries: [{ value: "  " }] });
    expect(blank.body.error.details.fieldViolations).toEqual([{ field: "entries[0].value", description: "is required" }]);
  });

  it("refuse an e-mail entry that is no address, saying how to match a domain, and still remove one stored before", async () => {
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, testKey);
    expect((await as("PUT", "/api/v1/lists/spam_emails", { kind: "email", type: "deny" })).status).toBe(201);
    const refused = await as<ErrorJson>("POST", "/api/v1/lists/spam_emails/entries", {
      entries: [{ value: "@spam-domain.com" }, { value: "foo" }, { value: "a@@b.com" }, { value: "Ok@Example.com" }],
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error.details.fieldViolations).toEqual([
      { field: "entries[0].value", description: "is a domain, not an e-mail address: an e-mail list matches whole addresses; match a domain with a rule on signals.email.domain" },
      { field: "entries[1].value", description: "is not an e-mail address (local-part@domain, as decide judges signals.email.valid)" },
      { field: "entries[2].value", description: "is not an e-mail address (local-part@domain, as decide judges signals.email.valid)" },
    ]);
    expect((await as<{ data: { list: { entryCount: number } } }>("GET", "/api/v1/lists/spam_emails")).body.data.list.entryCount).toBe(0);
    // As an earlier release took it: still removable by what the list shows.
    const account = server.app.db.prepare("SELECT account_id AS id FROM lists WHERE name = 'spam_emails'").get() as { id: string };
    server.app.db.prepare("INSERT INTO list_entries VALUES (?, 'test', 'spam_emails', '@spam-domain.com', NULL, ?)").run(account.id, clock.now());
    expect((await as<{ data: { removed: number } }>("POST", "/api/v1/lists/spam_emails/remove", { values: ["@spam-domain.com"] })).body.data.removed).toBe(1);
  });

  it("refuses an automatic allow list with 400 naming the field, storing nothing", async () => {
    const owner = server.createAccount("Automatic lists").keys.live.secret;
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, owner);
    const refused = await as<ErrorJson>("PUT", "/api/v1/lists/auto_allow", { kind: "user", type: "allow", automatic: true });
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR" } });
    expect(refused.body.error.details.fieldViolations?.map((v) => v.field)).toEqual(["automatic"]);
    expect((await as("GET", "/api/v1/lists/auto_allow")).status).toBe(404);
    // An automatic deny list may not be turned into an automatic allow list either.
    expect((await as("PUT", "/api/v1/lists/auto_deny", { kind: "user", type: "deny", automatic: true })).status).toBe(201);
    const changed = await as<ErrorJson>("PUT", "/api/v1/lists/auto_deny", { kind: "user", type: "allow", automatic: true });
    expect(changed.status).toBe(400);
    expect(changed.body.error.details.fieldViolations?.map((v) => v.field)).toEqual(["automatic"]);
    const kept = await as<{ data: { list: { type: string; automatic: boolean } } }>("GET", "/api/v1/lists/auto_deny");
    expect(kept.body.data.list).toMatchObject({ type: "deny", automatic: true });
  });

  it("refuses an entry whose expiresAt is already past (or now) with 400, adding nothing of the call", async () => {
    const owner = server.createAccount("Expired entries").keys.live.secret;
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, owner);
    expect((await as("PUT", "/api/v1/lists/timed", { kind: "user", type: "deny" })).status).toBe(201);
    for (const expiresAt of [clock.now() - 60_000, clock.now()]) {
      const refused = await as<ErrorJson>("POST", "/api/v1/lists/timed/entries", { entries: [{ value: "fresh_user" }, { value: "stale_user", expiresAt: new Date(expiresAt).toISOString() }] });
      expect(refused.status).toBe(400);
      expect(refused.body).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR", message: expect.stringMatching(/entries\[1\]\.expiresAt is in the past/) } });
      expect(refused.body.error.details.fieldViolations?.map((v) => v.field)).toEqual(["entries[1].expiresAt"]);
    }
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM list_entries WHERE list_name = 'timed'").get()).toEqual({ n: 0 });
    const list = await as<{ data: { list: { entryCount: number }; entries: unknown[] } }>("GET", "/api/v1/lists/timed");
    expect(list.body.data.list.entryCount).toBe(0);
    expect(list.body.data.entries).toEqual([]);
    // A millisecond ahead is accepted.
    expect((await as("POST", "/api/v1/lists/timed/entries", { entries: [{ value: "fresh_user", expiresAt: new Date(clock.now() + 1).toISOString() }] })).status).toBe(200);
  });
});

describe("lists saved by an earlier release", () => {
  it("stay usable: a range stored as typed is removed by any spelling, a list named by a now-reserved word still answers", async () => {
    const { account, keys } = server.createAccount("Old lists");
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, keys.live.secret);
    expect((await as("PUT", "/api/v1/lists/ranges", { kind: "ip", type: "deny" })).status).toBe(201);
    // As an earlier release stored them: as typed, and a list named null.
    const now = clock.now();
    server.app.db.prepare("INSERT INTO list_entries VALUES (?, 'live', 'ranges', '10.1.2.3/16', NULL, ?)").run(account.id, now);
    server.app.db.prepare("INSERT INTO lists VALUES (?, 'live', 'null', 'user', 'deny', '', 0, ?, ?)").run(account.id, now, now);
    const removed = await as<{ data: { removed: number } }>("POST", "/api/v1/lists/ranges/remove", { values: ["::ffff:10.1.0.0/112"] });
    expect(removed).toMatchObject({ status: 200, body: { data: { removed: 1 } } });
    expect((await as<{ data: { list: { entryCount: number } } }>("GET", "/api/v1/lists/ranges")).body.data.list.entryCount).toBe(0);
    expect((await as("GET", "/api/v1/lists/null")).status).toBe(200);
    // And the account's decisions go on: its lists, that one included, still build.
    expect((await as("POST", "/api/v1/decide", { userId: "after_old_lists", action: "login" })).status).toBe(200);
    expect((await as("DELETE", "/api/v1/lists/null")).status).toBe(204);
    // A new one cannot take such a name.
    expect((await as<ErrorJson>("PUT", "/api/v1/lists/null", { kind: "user", type: "deny" })).status).toBe(400);
  });
});

describe("limits on what an account holds", () => {
  /** A condition of exactly `length` characters that compiles. */
  const conditionOf = (length: number) => {
    const condition = `score >= 0${" && score >= 0".repeat(Math.floor((length - 10) / 14))}`;
    return `${condition}${" ".repeat(length - condition.length)}`;
  };

  it("refuses a policy whose conditions are too large together with 400, before compiling them", async () => {
    const owner = server.createAccount("Verbose").keys.live.secret;
    // Rules that would not compile either (x is unknown): the size is what the answer names.
    const rules = Array.from({ length: 5 }, () => ({ condition: `${conditionOf(3_990)} && x > 1`, action: "deny" }));
    for (const [method, path] of [["POST", "/api/v1/policies"], ["POST", "/api/v1/policies/backtest"]] as const) {
      const refused = await call<ErrorJson>(method, path, { name: "verbose", rules }, owner);
      expect(refused.status).toBe(400);
      expect(refused.body.error.details.fieldViolations).toEqual([{ field: "rules", description: "its conditions hold 19995 characters together, more than the 16384 allowed" }]);
    }
    // Characters are code points, as each condition's own limit counts them: an emoji is one.
    const emoji = `userId == "${"😀".repeat(4_082)}"`;
    expect(emoji.length).toBe(8_176);
    expect((await call<PolicyJson>("POST", "/api/v1/policies", { name: "emoji", rules: Array.from({ length: 4 }, () => ({ condition: emoji, action: "deny" })) }, owner)).status).toBe(201);
    expect((await call<PolicyJson>("POST", "/api/v1/policies", { name: "just fits", rules: Array.from({ length: 4 }, () => ({ condition: conditionOf(4_096), action: "deny" })) }, owner)).status).toBe(201);
  });

  it("refuses enabled policies past the account's total of conditions with 409; disabled ones do not count", async () => {
    const owner = server.createAccount("Wordy", { policy_compiles: 1_000 }).keys.live.secret;
    const rules = Array.from({ length: 4 }, () => ({ condition: conditionOf(4_000), action: "deny" }));
    for (let i = 0; i < 16; i++) expect((await call<PolicyJson>("POST", "/api/v1/policies", { name: `w${i}`, rules }, owner)).status).toBe(201);
    const refused = await call<ErrorJson>("POST", "/api/v1/policies", { name: "w16", rules }, owner);
    expect(refused.status).toBe(409);
    expect(refused.body.error.message).toBe("this account and environment's enabled policies would hold 272000 characters of conditions, more than the 262144 allowed; disable or shorten one first");
    const parked = await call<PolicyJson>("POST", "/api/v1/policies", { name: "w16", status: "disabled", rules }, owner);
    expect(parked.status).toBe(201);
    expect((await call<ErrorJson>("PUT", `/api/v1/policies/${parked.body.id}`, { name: "w16", status: "shadow", rules }, owner)).status).toBe(409);
    expect((await call<{ policies: PolicyJson[] }>("GET", "/api/v1/policies", undefined, owner)).body.policies).toHaveLength(18);
  });

  it("limits what compiles policies to 120 calls a minute per account and environment, the refused ones counted", async () => {
    const owner = server.createAccount("Busy editor").keys.live.secret;
    const create = (valid: boolean) => call<ErrorJson>("POST", "/api/v1/policies", { name: "draft", rules: [{ condition: valid ? "score > 50" : "x > 1", action: "deny" }] }, owner);
    for (let i = 0; i < 60; i++) {
      const refused = await create(false);
      expect(refused.status).toBe(400);
      // Compiled, then refused: the call counted.
      expect(refused.headers.get("ratelimit")).toMatch(new RegExp(`^"policy_compiles";r=${119 - i};`));
    }
    for (let i = 0; i < 59; i++) expect((await create(true)).status).toBe(201);
    expect((await call("POST", "/api/v1/policies/backtest", { rules: [{ condition: "score > 50", action: "deny" }] }, owner)).status).toBe(200);
    const limited = await create(true);
    expect(limited.status).toBe(429);
    expect(limited.body.error.code).toBe("RATE_LIMIT_EXCEEDED");
    expect(limited.headers.get("ratelimit-policy")).toBe('"policy_compiles";q=120;w=60');
    expect(limited.headers.get("retry-after")).toBe("60");
    // Reading is not limited, nor is another environment.
    expect((await call("GET", "/api/v1/policies", undefined, owner)).status).toBe(200);
    clock.advance(60_000);
    expect((await create(true)).status).toBe(201);
  });

  it("refuses a policy, a list or list entries past their limits with 409, keeping nothing of the refused call", async () => {
    // Past the compile rate limit: this test is about what an account holds, not how fast it saves.
    const hoarder = server.createAccount("Hoarder", { policy_compiles: 1_000 });
    const owner = hoarder.keys.live.secret;
    const as = <T>(method: string, path: string, body?: unknown) => call<T>(method, path, body, owner);
    const stored = (sql: string) => (server.app.db.prepare(sql).get(hoarder.account.id) as { n: number }).n;
    for (let i = 0; i < MAX_POLICIES; i++) {
      expect((await as<PolicyJson>("POST", "/api/v1/policies", { name: `p${i}`, status: "disabled", rules: [{ condition: "false", action: "deny" }] })).status).toBe(201);
    }
    const policy = await as<ErrorJson>("POST", "/api/v1/policies", { name: "one too many", rules: [{ condition: "false", action: "deny" }] });
    expect(policy).toMatchObject({ status: 409, body: { error: { code: "CONFLICT", message: expect.stringMatching(/already hold 200 policies/) } } });
    // Nothing of it was kept: no policy, no version of one, no audit entry.
    const policies = (await as<{ policies: PolicyJson[] }>("GET", "/api/v1/policies")).body.policies;
    expect(policies).toHaveLength(MAX_POLICIES + 1);
    expect(policies.filter((p) => p.builtIn)).toHaveLength(1);
    expect(policies.map((p) => p.name)).not.toContain("one too many");
    expect(stored("SELECT count(*) AS n FROM policies WHERE account_id = ?")).toBe(MAX_POLICIES);
    expect(stored("SELECT count(*) AS n FROM policy_versions WHERE account_id = ?")).toBe(MAX_POLICIES);
    expect(stored("SELECT count(*) AS n FROM audit_log WHERE account_id = ? AND action LIKE 'policy.%'")).toBe(MAX_POLICIES);

    for (let i = 0; i < MAX_LISTS; i++) expect((await as("PUT", `/api/v1/lists/l${i}`, { kind: "ip", type: "deny" })).status).toBe(201);
    expect((await as<ErrorJson>("PUT", "/api/v1/lists/one_too_many", { kind: "ip", type: "deny" })).status).toBe(409);
    const lists = (await as<{ data: { lists: Array<{ name: string }> } }>("GET", "/api/v1/lists")).body.data.lists;
    expect(lists).toHaveLength(MAX_LISTS);
    expect(lists.map((l) => l.name)).not.toContain("one_too_many");
    expect(stored("SELECT count(*) AS n FROM lists WHERE account_id = ?")).toBe(MAX_LISTS);
    expect(stored("SELECT count(*) AS n FROM audit_log WHERE account_id = ? AND action LIKE 'list.%'")).toBe(MAX_LISTS);
    // Changing a list it already holds is still fine.
    expect((await as("PUT", "/api/v1/lists/l0", { kind: "ip", type: "allow" })).status).toBe(200);

    const batch = (from: number, count: number) => ({ entries: Array.from({ length: count }, (_, i) => ({ value: `10.${Math.floor((from + i) / 65_536)}.${Math.floor((from + i) / 256) % 256}.${(from + i) % 256}` })) });
    for (let from = 0; from < MAX_LIST_ENTRIES; from += 10_000) expect((await as("POST", "/api/v1/lists/l1/entries", batch(from, 10_000))).status).toBe(200);
    const over = await as<ErrorJson>("POST", "/api/v1/lists/l1/entries", batch(MAX_LIST_ENTRIES, 2));
    expect(over).toMatchObject({ status: 409, body: { error: { message: expect.stringMatching(/would hold 100002 entries, more than the 100000 allowed; nothing was added/) } } });
    expect((await as<{ data: { list: { entryCount: number } } }>("GET", "/api/v1/lists/l1")).body.data.list.entryCount).toBe(MAX_LIST_ENTRIES);
  }, 60_000);
});

describe("a stored policy that no longer compiles", () => {
  it("is skipped by decide and refused by its backtest with 409 naming the problem, never a 500", async () => {
    const saved = await call<PolicyJson>("POST", "/api/v1/policies", { name: "Stale", status: "active", priority: 5, rules: [{ condition: "score > 95", action: "deny" }] });
    expect(saved.status).toBe(201);
    // As if saved by an earlier release, before nested loops were refused.
    const nested = JSON.stringify([{ condition: "[1, 2].exists(a, [3, 4].exists(b, a < b))", action: "deny", description: "" }]);
    server.app.db.prepare("UPDATE policies SET rules = ?, version = version + 1 WHERE id = ?").run(nested, saved.body.id);
    // Any change through the API drops the account's cached policy set.
    expect((await call<PolicyJson>("POST", "/api/v1/policies", { name: "Nudge", status: "disabled", rules: [{ condition: "false", action: "deny" }] })).status).toBe(201);
    const logged = server.logs.length;
    expect((await decide({ userId: "after_stale", action: "login" })).decision).toMatch(/^(allow|challenge|deny)$/);
    // Skipped, and said so, when the account's policies were loaded for that decide.
    expect(server.logs.slice(logged).some((line) => line.includes("a stored policy no longer compiles") && line.includes(saved.body.id))).toBe(true);
    const replay = await call<ErrorJson>("POST", `/api/v1/policies/${saved.body.id}/backtest`, {});
    expect(replay.status).toBe(409);
    expect(replay.body.error.message).toMatch(new RegExp(`^policy ${saved.body.id} no longer compiles and must be updated first: rule 0`));
  });
});

describe("what a backtest counts", () => {
  type Outcome = { evaluated: number; changed: number; matched: number; errors: number };
  /** A new account with the given policies saved and one login decided per user id, in that order. */
  async function accountWith(policies: Array<Record<string, unknown>>, userIds: string[]) {
    const owner = server.createAccount("Backtester").keys.live.secret;
    const saved: PolicyJson[] = [];
    for (const policy of policies) saved.push((await call<PolicyJson>("POST", "/api/v1/policies", policy, owner)).body);
    for (const userId of userIds) expect((await call("POST", "/api/v1/decide", { userId, action: "login", ip: UK_IP, ...HUMAN_DESKTOP }, owner)).status).toBe(200);
    const window = { from: new Date(clock.now() - 3_600_000).toISOString(), to: new Date(clock.now() + 1000).toISOString() };
    const backtest = async (path: string, body: Record<string, unknown>) => {
      const answer = await call<{ data: Outcome }>("POST", path, { ...body, window }, owner);
      expect(answer.status).toBe(200);
      return answer.body.data;
    };
    return { saved, backtest, owner };
  }

  it("reads the lists as they are now, and the signals as they were at each decision (docs/policies.md)", async () => {
    const { backtest, owner } = await accountWith([], ["l_listed_later", "l_never"]);
    expect((await call("PUT", "/api/v1/lists/deny_users", { kind: "user", type: "deny" }, owner)).status).toBe(201);
    // Listed when it was decided, no longer listed now; and the other way round.
    expect((await call("POST", "/api/v1/lists/deny_users/entries", { entries: [{ value: "l_unlisted_later" }] }, owner)).status).toBe(200);
    expect((await call("POST", "/api/v1/decide", { userId: "l_unlisted_later", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }, owner)).status).toBe(200);
    expect((await call("POST", "/api/v1/lists/deny_users/remove", { values: ["l_unlisted_later"] }, owner)).status).toBe(200);
    expect((await call("POST", "/api/v1/lists/deny_users/entries", { entries: [{ value: "l_listed_later" }] }, owner)).status).toBe(200);
    // The list rule matches the one the list holds now, an allowed decision it changes to deny; the signal is
    // the one the deny list held then, denied already by DENYLISTED's floor.
    const byList = await backtest("/api/v1/policies/backtest", { rules: [{ condition: "userId in lists.deny_users", action: "deny" }] });
    expect(byList).toMatchObject({ evaluated: 3, matched: 1, changed: 1 });
    const bySignal = await backtest("/api/v1/policies/backtest", { rules: [{ condition: "signals.lists.denylisted", action: "deny" }] });
    expect(bySignal).toMatchObject({ evaluated: 3, matched: 1, changed: 0 });
  });

  it("counts the backtested policy's own rule errors, not those of the account's other policies", async () => {
    const failing = { condition: "score / 0.0 > 1.0", action: "deny" };
    const { backtest } = await accountWith(
      [{ name: "Broken", status: "active", priority: 500, rules: [failing, { condition: "metadata.missing == 1", action: "deny" }, { condition: "userId in lists.nowhere", action: "deny" }] }],
      ["e_1", "e_2", "e_3", "e_4"],
    );
    // The draft cannot fail; the active policy above it fails three times on every decision.
    expect(await backtest("/api/v1/policies/backtest", { rules: [{ condition: "score >= 50", action: "deny" }] })).toMatchObject({ evaluated: 4, errors: 0 });
    // A draft's own failing rule counts once per decision it was evaluated on.
    expect(await backtest("/api/v1/policies/backtest", { rules: [failing, { condition: "score >= 50", action: "deny" }] })).toMatchObject({ evaluated: 4, errors: 4 });
  });

  it("counts a match on every decision, as live shadow results do, also where a policy above decided first", async () => {
    const { saved, backtest } = await accountWith(
      [
        { name: "Review s_rev", status: "active", priority: 50, rules: [{ condition: 'userId == "s_rev"', action: "review" }] },
        { name: "Deny s_", status: "shadow", priority: 10, rules: [{ condition: 'userId.startsWith("s_")', action: "deny" }] },
      ],
      ["s_rev", "s_plain", "other"],
    );
    const shadow = saved[1] as PolicyJson;
    const liveMatches = (server.app.db.prepare("SELECT record FROM decisions").all() as Array<{ record: string }>)
      .filter((row) => (JSON.parse(row.record) as { policyResults: Array<{ policyId: string; matchedRule: number }> }).policyResults.some((r) => r.policyId === shadow.id && r.matchedRule >= 0)).length;
    expect(liveMatches).toBe(2);
    // s_rev stays challenged by the review rule above it; only s_plain's decision changes.
    expect(await backtest(`/api/v1/policies/${shadow.id}/backtest`, {})).toMatchObject({ evaluated: 3, changed: 1, matched: 2 });
    expect(await backtest("/api/v1/policies/backtest", { rules: [{ condition: "true", action: "allow" }] })).toMatchObject({ evaluated: 3, matched: 3 });
  });
});

describe("the e-mail and address rules read", () => {
  it("are those lists compare, in live decisions and in backtests alike", async () => {
    const owner = server.createAccount("Spellings").keys.live.secret;
    const rules = [
      { condition: "email.endsWith('@mailinator.com')", action: "deny" },
      { condition: "ip == '2a00:1450:4002:81c::1'", action: "review" },
    ];
    const active = (await call<PolicyJson>("POST", "/api/v1/policies", { name: "Spellings", status: "active", priority: 100, rules }, owner)).body;
    const requests = [
      { userId: "sp_1", email: "Bob@Mailinator.COM", ip: UK_IP, expected: { decision: "deny", matchedRule: 0 } },
      { userId: "sp_2", email: " bob@mailinator.com ", ip: UK_IP, expected: { decision: "deny", matchedRule: 0 } },
      { userId: "sp_3", email: "jane@example.com", ip: "2A00:1450:4002:081C:0:0:0:1", expected: { decision: "challenge", matchedRule: 1 } },
      { userId: "sp_4", email: "jane@example.com", ip: UK_IP, expected: { decision: "allow", matchedRule: -1 } },
    ];
    for (const { expected, ...request } of requests) {
      const answer = await call<{ data: { decision: string; evidenceId: string } }>("POST", "/api/v1/decide", { action: "login", ...request, ...HUMAN_DESKTOP }, owner);
      expect(answer.body.data.decision, request.userId).toBe(expected.decision);
      const row = server.app.db.prepare("SELECT record FROM decisions WHERE evidence_id = ?").get(answer.body.data.evidenceId) as { record: string };
      const results = (JSON.parse(row.record) as { policyResults: Array<{ policyId: string; matchedRule: number }> }).policyResults;
      expect(results.find((r) => r.policyId === active.id)?.matchedRule, request.userId).toBe(expected.matchedRule);
    }
    // Replayed from the stored requests, as sent: the same rules match the same decisions.
    const window = { from: new Date(clock.now() - 3_600_000).toISOString(), to: new Date(clock.now() + 1000).toISOString() };
    const replayed = await call<{ data: { evaluated: number; changed: number; matched: number } }>("POST", `/api/v1/policies/${active.id}/backtest`, { window }, owner);
    expect(replayed.body.data).toMatchObject({ evaluated: 4, changed: 0, matched: 3 });
    const draft = await call<{ data: { evaluated: number; matched: number } }>("POST", "/api/v1/policies/backtest", { rules, priority: 200, window }, owner);
    expect(draft.body.data).toMatchObject({ evaluated: 4, matched: 3 });
  });
});

describe("review rules", () => {
  it("challenge the end user and open a case whatever the score", async () => {
    await call<PolicyJson>("POST", "/api/v1/policies", { name: "Review big transfers", status: "active", priority: 200, actions: ["transfer"], rules: [{ condition: "amount > 5000", action: "review" }] });
    const result = await decide({ userId: "big_mover", action: "transfer", amount: 9000, currency: "EUR", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(result.score).toBeLessThan(80);
    expect(result.decision).toBe("challenge");
    await server.app.settled();
    const cases = await call<{ data: { cases: Array<{ decisionId: string; priority: string; status: string }> } }>("GET", "/api/v1/cases");
    expect(cases.body.data.cases.find((c) => c.decisionId === result.id)).toMatchObject({ status: "open", priority: "low" });
  });
});

describe("audit of policy and list changes", () => {
  it("records every policy and list change in the signed audit log", () => {
    const actions = (server.app.db.prepare("SELECT action FROM audit_log").all() as Array<{ action: string }>).map((row) => row.action);
    expect(actions).toEqual(expect.arrayContaining(["policy.created", "policy.updated", "policy.deleted", "list.updated", "list.entries_added", "list.entries_removed"]));
  });

  it("records a hash of the entries a call added or removed, which a copy of them can be checked against", async () => {
    await call("PUT", "/api/v1/lists/audited_emails", { kind: "email", type: "deny" });
    const expiresAt = new Date(Date.now() + 86_400_000).toISOString();
    // Normalised (lower case) and sorted by value before hashing, whatever order and spelling the call used.
    await call("POST", "/api/v1/lists/audited_emails/entries", { entries: [{ value: "Zed@Example.com", expiresAt }, { value: "amy@example.com" }] });
    await call("POST", "/api/v1/lists/audited_emails/remove", { values: ["zed@example.com", "nobody@example.com"] });
    const entries = server.app.db
      .prepare("SELECT action, body FROM audit_log WHERE subject = 'audited_emails' AND action LIKE 'list.entries_%' ORDER BY seq")
      .all() as Array<{ action: string; body: string }>;
    const sha256 = (value: unknown) => createHash("sha256").update(JSON.stringify(value)).digest("hex");
    expect(entries.map((entry) => [entry.action, (JSON.parse(entry.body) as { data: unknown }).data])).toEqual([
      ["list.entries_added", { added: 2, updated: 0, entriesHash: sha256([["amy@example.com", null], ["zed@example.com", Date.parse(expiresAt)]]) }],
      ["list.entries_removed", { removed: 1, entriesHash: sha256([["nobody@example.com"], ["zed@example.com"]]) }],
    ]);
  });
});
