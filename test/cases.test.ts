import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_CASE_NOTES, caseForDecision } from "../src/cases/case-service.js";
import type { WebhookEvent } from "../src/webhooks/events.js";
import { HUMAN_DESKTOP, UK_IP, botAttack } from "./helpers/inputs.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

let server: TestServer;
let acme: ReturnType<TestServer["createAccount"]>;
let globex: ReturnType<TestServer["createAccount"]>;
const events: WebhookEvent[] = [];

interface CaseJson { id: string; status: string; priority: string; score: number; decision: string; reasons: string[]; createdAt: string; decisionId: string; userId: string; assignee: string; notes: Array<{ text: string; createdAt: string }> }

beforeAll(async () => {
  server = await startTestServer();
  server.app.events.addSink({ wants: () => true, deliver: (_tenant, event) => {
    events.push(event);
  } });
  acme = server.createAccount("Acme");
  globex = server.createAccount("Globex");
});
afterAll(() => server.close());

async function decide(key: string, body: Record<string, unknown>) {
  const res = await fetch(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
  return ((await res.json()) as { data: { score: number; evidenceId: string } }).data;
}

async function listCases(key: string, query = "") {
  const res = await fetch(`${server.url}/api/v1/cases${query}`, { headers: { "x-api-key": key } });
  return { status: res.status, body: (await res.json()) as { success: boolean; data: { cases: CaseJson[]; count: number } } };
}

async function updateCase(key: string, id: string, body: Record<string, unknown>) {
  const res = await fetch(`${server.url}/api/v1/cases/${id}`, { method: "PATCH", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as { data: CaseJson; error?: { code: string; message: string } } };
}

describe("cases", () => {
  let caseId = "";

  it("opens a case for a decision at score 80 and above, through the outbox, and emits case.created", async () => {
    const risky = await decide(acme.keys.test.secret, { userId: "fraudster", action: "checkout", amount: 900, currency: "USD", ...botAttack("185.220.101.45") });
    const clean = await decide(acme.keys.test.secret, { userId: "regular", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(risky.score).toBeGreaterThanOrEqual(80);
    expect(clean.score).toBeLessThan(80);
    await server.app.settled();
    const { status, body } = await listCases(acme.keys.test.secret);
    expect(status).toBe(200);
    expect(body.success).toBe(true);
    expect(body.data.count).toBe(1);
    const [opened] = body.data.cases;
    expect(opened).toMatchObject({ status: "open", decision: "deny", userId: "fraudster", score: risky.score });
    expect(opened?.id).toMatch(/^case_/);
    expect(["critical", "high", "medium", "low"]).toContain(opened?.priority);
    expect(new Date(opened?.createdAt ?? "").toISOString()).toBe(opened?.createdAt);
    caseId = opened?.id ?? "";
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(["decision.deny", "decision.allow", "case.created"]));
    const created = events.find((e) => e.type === "case.created");
    expect(created).toMatchObject({ environment: "test", accountId: acme.account.id, data: { case: { id: caseId } } });
  });

  it("opens a case from a score of exactly 80, not at 79 unless a review rule decided", () => {
    // The engine's score cannot be steered to an exact value from the API, so the decision writer's own rule is asked.
    const decision = (score: number) => ({ id: "dec_boundary", userId: "edge", score, decision: "deny", reasons: ["TOR_EXIT"] });
    expect(caseForDecision(decision(80), false)).toMatchObject({ decisionId: "dec_boundary", userId: "edge", score: 80, priority: "low" });
    expect(caseForDecision(decision(79), false)).toBeUndefined();
    expect(caseForDecision(decision(79), true)).toMatchObject({ score: 79, priority: "low" });
    expect(caseForDecision(decision(0), true)).toMatchObject({ score: 0, priority: "low" });
  });

  it("filters by status and priority and pages with limit and offset (count is the page size)", async () => {
    for (let i = 0; i < 3; i++) await decide(acme.keys.test.secret, { userId: `bot_${i}`, action: "signup", ...botAttack("185.220.101.45") });
    // A case of another priority: a review rule opens one for a clean decision, and its score bands it low.
    const policy = await fetch(`${server.url}/api/v1/policies`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": acme.keys.test.secret },
      body: JSON.stringify({ name: "Review one user", status: "active", priority: 100, rules: [{ condition: "userId == 'under_review'", action: "review" }] }),
    });
    expect(policy.status).toBe(201);
    const reviewed = await decide(acme.keys.test.secret, { userId: "under_review", action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(reviewed.score).toBeLessThan(80);
    await server.app.settled();
    const all = await listCases(acme.keys.test.secret);
    expect(all.body.data.count).toBe(5);
    const page = await listCases(acme.keys.test.secret, "?limit=2&offset=1");
    expect(page.body.data.count).toBe(2);
    expect(page.body.data.cases.map((c) => c.id)).toEqual(all.body.data.cases.slice(1, 3).map((c) => c.id));
    const low = all.body.data.cases.filter((c) => c.priority === "low");
    expect(low.map((c) => c.userId)).toEqual(["under_review"]);
    const bots = all.body.data.cases.filter((c) => c.priority !== "low");
    expect(bots).toHaveLength(4);
    const priorities = [...new Set(all.body.data.cases.map((c) => c.priority))];
    expect(priorities.length).toBeGreaterThanOrEqual(2);
    for (const priority of priorities) {
      const filtered = await listCases(acme.keys.test.secret, `?status=open&priority=${priority}`);
      expect(filtered.body.data.count, priority).toBeGreaterThan(0);
      expect(filtered.body.data.cases.map((c) => c.id), priority).toEqual(all.body.data.cases.filter((c) => c.priority === priority).map((c) => c.id));
    }
    expect((await listCases(acme.keys.test.secret, "?status=resolved")).body.data.count).toBe(0);
  });

  it("moves a case along documented transitions, with assignee and notes, and refuses invalid ones with 409", async () => {
    const working = await updateCase(acme.keys.test.secret, caseId, { status: "investigating", assignee: "ana@acme.test", note: "card testing pattern" });
    expect(working.status).toBe(200);
    expect(working.body.data).toMatchObject({ status: "investigating", assignee: "ana@acme.test", notes: [{ text: "card testing pattern" }] });
    // The status filter finds the case in its new status, and no longer among the open ones.
    const ids = async (query: string) => (await listCases(acme.keys.test.secret, query)).body.data.cases.map((c) => c.id);
    expect(await ids("?status=investigating")).toEqual([caseId]);
    expect(await ids("?status=open")).not.toContain(caseId);
    const resolved = await updateCase(acme.keys.test.secret, caseId, { status: "resolved", note: "confirmed fraud" });
    expect(resolved.body.data.status).toBe("resolved");
    expect(resolved.body.data.notes).toHaveLength(2);
    expect(await ids("?status=resolved")).toEqual([caseId]);
    expect(await ids("?status=investigating")).toEqual([]);
    const invalid = await updateCase(acme.keys.test.secret, caseId, { status: "escalated" });
    expect(invalid.status).toBe(409);
    expect(invalid.body.error?.code).toBe("CONFLICT");
    expect(invalid.body.error?.message).toMatch(/from resolved to escalated.*open/);
    await server.app.settled();
    const resolvedEvent = events.find((e) => e.type === "case.resolved");
    expect(resolvedEvent).toMatchObject({ data: { case: { id: caseId, status: "resolved" }, previousStatus: "investigating" } });
  });

  it("holds at most 100 notes: the 101st is refused with 409 and nothing of its change applies", async () => {
    const owner = server.createAccount("Notes").keys.live.secret;
    const made = await decide(owner, { userId: "noted", action: "checkout", amount: 900, currency: "USD", ...botAttack("185.220.101.45") });
    await server.app.settled();
    const id = (server.app.db.prepare("SELECT id FROM cases WHERE decision_id = (SELECT id FROM decisions WHERE evidence_id = ?)").get(made.evidenceId) as { id: string }).id;
    for (let i = 0; i < MAX_CASE_NOTES; i++) expect((await updateCase(owner, id, { note: `note ${i}` })).status).toBe(200);
    const refused = await updateCase(owner, id, { note: "one more", assignee: "bo@acme.test", status: "investigating" });
    expect(refused.status).toBe(409);
    expect(refused.body.error?.message).toBe(`case ${id} holds 100 notes, and 100 are the most allowed; nothing of this change was applied`);
    const kept = await updateCase(owner, id, { assignee: "bo@acme.test" });
    expect(kept.body.data).toMatchObject({ status: "open", assignee: "bo@acme.test" });
    expect(kept.body.data.notes).toHaveLength(MAX_CASE_NOTES);
    // An assignee is a name on one line: a control character is refused, and the case keeps its assignee.
    for (const assignee of ["bo\u0000@acme.test", "bo@acme.test\nCC: eve", "\u001b[31mbo"]) {
      const bad = await updateCase(owner, id, { assignee });
      expect(bad.status, JSON.stringify(assignee)).toBe(400);
      expect(bad.body.error?.message).toMatch(/assignee/);
    }
    expect((await updateCase(owner, id, { assignee: "" })).body.data).toMatchObject({ assignee: "" });
  });

  it("gets one case, and hides cases from other accounts, environments and publishable keys", async () => {
    const res = await fetch(`${server.url}/api/v1/cases/${caseId}`, { headers: { "x-api-key": acme.keys.test.secret } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: CaseJson }).data.id).toBe(caseId);
    for (const key of [acme.keys.live.secret, globex.keys.test.secret]) {
      expect((await fetch(`${server.url}/api/v1/cases/${caseId}`, { headers: { "x-api-key": key } })).status).toBe(404);
      expect((await updateCase(key, caseId, { status: "open" })).status).toBe(404);
      expect((await listCases(key)).body.data.count).toBe(0);
    }
    expect((await listCases(acme.keys.test.publishable)).status).toBe(403);
  });

  it("applies defaults of 50 and 0 and rejects a limit above 100", async () => {
    // More cases than a default page holds, in an account of their own.
    const initech = server.createAccount("Initech");
    for (let i = 0; i < 55; i++) await decide(initech.keys.test.secret, { userId: `bot_${i}`, action: "signup", ...botAttack("185.220.101.45") });
    await server.app.settled();
    const everything = await listCases(initech.keys.test.secret, "?limit=100");
    expect(everything.body.data.count).toBe(55);
    const defaults = await listCases(initech.keys.test.secret);
    expect(defaults.body.data.count).toBe(50);
    expect(defaults.body.data.cases.map((c) => c.id)).toEqual(everything.body.data.cases.slice(0, 50).map((c) => c.id));
    expect((await listCases(acme.keys.test.secret, "?limit=100")).status).toBe(200);
    expect((await listCases(acme.keys.test.secret, "?limit=101")).status).toBe(400);
    expect((await listCases(acme.keys.test.secret, "?limit=0")).status).toBe(400);
    expect((await listCases(acme.keys.test.secret, "?offset=-1")).status).toBe(400);
  });
});
