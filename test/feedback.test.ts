import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CATEGORIES, DEFAULT_WEIGHTS, MAX_WEIGHT, MIN_WEIGHT, validateWeights, type Category } from "../src/engine/index.js";
import { entryHash } from "../src/audit/entry.js";
import { canonicalJson, sha256Hex } from "../src/canonical-json.js";
import { MAX_SHIFT, adjustWeights, projectOntoBounds, totalShift } from "../src/feedback/learning.js";
import { ENTRY_GRACE_MS } from "../src/feedback/processor.js";
import { DEAD_LETTER_RETENTION_MS } from "../src/outbox/outbox.js";
import { ListRepository } from "../src/store/lists.js";
import { MAX_LIST_ENTRIES } from "../src/policies/index.js";
import type { WebhookEvent } from "../src/webhooks/events.js";
import { ManualClock } from "./helpers/clock.js";
import { HUMAN_DESKTOP } from "./helpers/inputs.js";
import { startTestServer, tempDir, type TestServer } from "./helpers/server.js";

const DAY = 24 * 60 * 60 * 1000;
const HOUR = 3_600_000;
const clock = new ManualClock();
let server: TestServer;
let acme: ReturnType<TestServer["createAccount"]>;
let globex: ReturnType<TestServer["createAccount"]>;
const events: WebhookEvent[] = [];

beforeAll(async () => {
  // A generous budget: these tests read the comprehensive path's graph signal, never the fast fallback.
  const datacenterRangesPath = path.join(tempDir("datacenters-"), "datacenters.txt");
  fs.writeFileSync(datacenterRangesPath, `# AWS us-east-1\n3.80.0.0/12\n`);
  server = await startTestServer({ clock, config: { engineThreads: 1, datacenterRangesPath } });
  acme = server.createAccount("Acme");
  globex = server.createAccount("Globex");
  server.app.events.addSink({
    wants: (_tenant, type) => type === "feedback.received",
    deliver: (_tenant, event) => {
      events.push(event);
    },
  });
});
afterAll(() => server.close());

interface DecideData { decision: string; score: number; reasons: string[]; evidenceId: string }
interface FeedbackData {
  feedbackId: string;
  decisionId: string;
  actualOutcome: string;
  weightsVersionBefore: number;
  weightsVersionAfter: number;
  adjustments: Record<string, number>;
  graphUpdated: boolean;
  consortiumShared: boolean;
  replacedPrevious: boolean;
}
interface ErrorBody { error: { code: string; message: string; details: { fieldViolations?: Array<{ field: string }> } } }

async function call<T>(key: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T; headers: Headers }> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { "content-type": "application/json", "x-api-key": key },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T, headers: res.headers };
}

async function decide(key: string, body: Record<string, unknown>): Promise<DecideData & { decisionId: string }> {
  const { status, body: response } = await call<{ data: DecideData }>(key, "POST", "/api/v1/decide", body);
  expect(status).toBe(200);
  const row = server.app.db.prepare("SELECT id FROM decisions WHERE evidence_id = ?").get(response.data.evidenceId) as { id: string };
  return { ...response.data, decisionId: row.id };
}

const feedback = (key: string, body: Record<string, unknown>) => call<{ data: FeedbackData } & ErrorBody>(key, "POST", "/api/v1/feedback", body);

async function signalsOf(key: string, decisionId: string): Promise<{ graph: { linkedToFraud: boolean; hops: number | null; fraudNeighbours: number } }> {
  const { body } = await call<{ data: { signals: { graph: { linkedToFraud: boolean; hops: number | null; fraudNeighbours: number } } } }>(key, "GET", `/api/v1/decisions/${decisionId}`);
  return body.data.signals;
}

async function eventually(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(check()).toBe(true);
}

/** Changes the audit log as anyone holding the file can: without its append-only triggers, put back afterwards. */
function tamperWithAuditLog(change: () => void): void {
  const db = server.app.db;
  db.exec("DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete;");
  try {
    change();
  } finally {
    db.exec(`CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
             CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;`);
  }
}

/** A throwaway mailbox with a random-looking local part, a fresh IP and device: nothing shared with earlier requests. */
function fraudPattern(i: number) {
  return {
    userId: `fraud_${i}`,
    action: "signup",
    email: `q${(i * 7919).toString(36)}x${i}z@mailinator.com`,
    ip: `81.2.69.${10 + i}`,
    deviceId: `dev_fraud_${i}`,
    ...HUMAN_DESKTOP,
  };
}

/** A real person who filled nothing in by hand (password manager, autofill): no interaction. */
function legitimatePattern(i: number) {
  return {
    userId: `legit_${i}`,
    action: "login",
    email: `jane.doe${i}@example.co.uk`,
    ip: `81.2.69.${120 + i}`,
    deviceId: `dev_legit_${i}`,
    ...HUMAN_DESKTOP,
    behavior: { timeOnPageMs: 30_000, formFillMs: 8_000, keystrokes: 0, pointerMoves: 0, pasteEvents: 0, clicks: 0 },
  };
}

describe("the learning rule", () => {
  const random = (seed: number) => () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };

  it("keeps every weight within 2%..40%, the sum at 1 and the shift within 5% × confidence, whatever it is fed", () => {
    const next = random(42);
    let weights = { ...DEFAULT_WEIGHTS.weights };
    for (let step = 0; step < 2_000; step++) {
      const scores = Object.fromEntries(CATEGORIES.map((category) => [category, next() < 0.5 ? 0 : next()]));
      const judged = CATEGORIES.filter(() => next() < 0.8);
      const outcome = (["fraud", "legitimate", "chargeback", "abuse", "valid"] as const)[Math.floor(next() * 5)] ?? "fraud";
      const confidence = next();
      const adjusted = adjustWeights(weights, scores, judged, outcome, confidence);
      expect(validateWeights({ version: 1, weights: adjusted }).ok).toBe(true);
      expect(totalShift(weights, adjusted)).toBeLessThanOrEqual(MAX_SHIFT * confidence + 1e-12);
      for (const category of CATEGORIES) {
        expect(adjusted[category]).toBeGreaterThanOrEqual(MIN_WEIGHT - 1e-9);
        expect(adjusted[category]).toBeLessThanOrEqual(MAX_WEIGHT + 1e-9);
        if (!judged.includes(category)) expect(adjusted[category], category).toBe(weights[category]);
      }
      weights = adjusted;
    }
  });

  it("moves weight toward the categories that called a fraud, and away from those that cried wolf", () => {
    const scores = { email: 1, behavior: 0 } as Record<string, number>;
    const afterFraud = adjustWeights(DEFAULT_WEIGHTS.weights, scores, CATEGORIES, "fraud", 1);
    expect(afterFraud.email).toBeCloseTo(DEFAULT_WEIGHTS.weights.email + MAX_SHIFT, 9);
    const afterLegit = adjustWeights(DEFAULT_WEIGHTS.weights, { behavior: 0.7 }, CATEGORIES, "legitimate", 1);
    expect(afterLegit.behavior).toBeLessThan(DEFAULT_WEIGHTS.weights.behavior);
    // A legitimate decision nothing flagged was already right: nothing moves.
    expect(adjustWeights(DEFAULT_WEIGHTS.weights, {}, CATEGORIES, "valid", 1)).toEqual(DEFAULT_WEIGHTS.weights);
    // A fraud nothing flagged gives no direction.
    expect(adjustWeights(DEFAULT_WEIGHTS.weights, {}, CATEGORIES, "fraud", 1)).toEqual(DEFAULT_WEIGHTS.weights);
    // Half the confidence, half the shift.
    expect(totalShift(DEFAULT_WEIGHTS.weights, adjustWeights(DEFAULT_WEIGHTS.weights, scores, CATEGORIES, "chargeback", 0.5))).toBeCloseTo(MAX_SHIFT / 2, 9);
  });

  it("teaches only the categories that had data: one that measured nothing called nothing", () => {
    // A login (no amount) whose store reads missed their budget: velocity, identity and graph had no data.
    const judged: Category[] = ["network", "device", "behavior", "email"];
    const scores = { email: 1 } as Record<string, number>;
    for (const outcome of ["legitimate", "fraud"] as const) {
      const adjusted = adjustWeights(DEFAULT_WEIGHTS.weights, scores, judged, outcome, 1);
      for (const category of ["velocity", "identity", "amount", "graph"] as const) expect(adjusted[category], `${outcome} ${category}`).toBe(DEFAULT_WEIGHTS.weights[category]);
      // The judged ones share what they had between them.
      const judgedMass = (weights: Record<Category, number>) => judged.reduce((sum, category) => sum + weights[category], 0);
      expect(judgedMass(adjusted)).toBeCloseTo(judgedMass(DEFAULT_WEIGHTS.weights), 12);
      expect(adjusted.email > DEFAULT_WEIGHTS.weights.email).toBe(outcome === "fraud");
    }
    // Nothing judged, nothing learned.
    expect(adjustWeights(DEFAULT_WEIGHTS.weights, scores, [], "fraud", 1)).toBe(DEFAULT_WEIGHTS.weights);
  });

  it("gives what a capped category cannot take to the others in proportion to their weight, and stops moving once the label can push no further", () => {
    // Every label: a fraud only the e-mail saw. Once the e-mail is capped at 40 %, no category that was wrong
    // may gain on any label, and their shares of the rest keep the ratios they had.
    const scores = { email: 1 } as Record<string, number>;
    let weights = { ...DEFAULT_WEIGHTS.weights };
    let versions = 0;
    for (let label = 0; label < 5_000; label++) {
      const adjusted = adjustWeights(weights, scores, CATEGORIES, "fraud", 1);
      for (const category of CATEGORIES) {
        if (category !== "email") expect(adjusted[category], `${category} after label ${label}`).toBeLessThanOrEqual(weights[category]);
      }
      if (adjusted !== weights) versions++;
      weights = adjusted;
    }
    expect(weights.email).toBeCloseTo(MAX_WEIGHT, 12);
    const others = CATEGORIES.filter((category) => category !== "email");
    const otherDefaults = others.reduce((sum, category) => sum + DEFAULT_WEIGHTS.weights[category], 0);
    for (const category of others) {
      expect(weights[category], category).toBeCloseTo(((1 - MAX_WEIGHT) * DEFAULT_WEIGHTS.weights[category]) / otherDefaults, 9);
    }
    // The e-mail reached the cap within a few labels; the thousands after it moved nothing, so stored no version.
    expect(versions).toBeLessThan(20);
  });

  it("projects onto the bounds by one common scale, clamped", () => {
    const skewed = { ...Object.fromEntries(CATEGORIES.map((category) => [category, 0.04 / 6])), email: 0.9, network: 0.06 } as Record<Category, number>;
    const projected = projectOntoBounds(skewed);
    expect(projected.email).toBe(MAX_WEIGHT);
    // The other seven share the remaining 60 % in proportion to what they had: network 60 % of it, the rest 10 % each.
    expect(projected.network).toBeCloseTo(0.36, 9);
    expect(projected.device).toBeCloseTo(0.04, 9);
    expect(validateWeights({ version: 1, weights: projected }).ok).toBe(true);
  });
});

describe("POST /api/v1/feedback", () => {
  it("is for secret keys only", async () => {
    const { status, body } = await feedback(acme.keys.test.publishable, { userId: "anyone", actualOutcome: "fraud" });
    expect(status).toBe(403);
    expect(body.error.code).toBe("FORBIDDEN");
  });

  it("finds the decision by decisionId, evidenceId or the user's most recent decision, and answers what changed", async () => {
    const first = await decide(acme.keys.test.secret, { ...fraudPattern(90), userId: "lookup_user" });
    clock.advance(HOUR);
    const latest = await decide(acme.keys.test.secret, { ...fraudPattern(91), userId: "lookup_user" });
    clock.advance(HOUR);

    const byUser = await feedback(acme.keys.test.secret, { userId: "lookup_user", actualOutcome: "fraud", notes: "chargeback filed" });
    expect(byUser.status).toBe(200);
    expect(byUser.body.data.decisionId).toBe(latest.decisionId);
    expect(byUser.body.data).toMatchObject({ actualOutcome: "fraud", replacedPrevious: false, graphUpdated: true, consortiumShared: false });
    expect(byUser.body.data.feedbackId).toMatch(/^fb_[0-9A-Za-z]{22}$/);
    expect(byUser.body.data.weightsVersionAfter).toBe(byUser.body.data.weightsVersionBefore + 1);
    expect(byUser.body.data.adjustments.email).toBeGreaterThan(0);
    const moved = Object.values(byUser.body.data.adjustments).reduce((sum, change) => sum + Math.abs(change), 0) / 2;
    // Each of the eight adjustments is rounded to 6 decimals: half of their sum may be 4e-6 off.
    expect(moved).toBeLessThanOrEqual(MAX_SHIFT + 4e-6);

    const byEvidence = await feedback(acme.keys.test.secret, { evidenceId: first.evidenceId, actualOutcome: "chargeback", confidence: 0.5 });
    expect(byEvidence.body.data.decisionId).toBe(first.decisionId);
    const byId = await feedback(acme.keys.test.secret, { decisionId: first.decisionId, evidenceId: first.evidenceId, actualOutcome: "fraud" });
    expect(byId.body.data).toMatchObject({ decisionId: first.decisionId, replacedPrevious: true });

    await eventually(() => events.some((event) => event.type === "feedback.received" && (event.data as { feedbackId: string }).feedbackId === byUser.body.data.feedbackId));
    const event = events.find((e) => e.type === "feedback.received" && (e.data as { feedbackId: string }).feedbackId === byUser.body.data.feedbackId);
    expect(event).toMatchObject({ accountId: acme.account.id, environment: "test", data: { decisionId: latest.decisionId, userId: "lookup_user", actualOutcome: "fraud", confidence: 1, decision: latest.decision, score: latest.score } });
  });

  it("leaves the weight of a category that had no data where it was: a signup has no amount to judge", async () => {
    for (const [i, actualOutcome] of ["legitimate", "fraud"].entries()) {
      const labelled = await decide(globex.keys.test.secret, { ...fraudPattern(93 + i), userId: `no_amount_${actualOutcome}` });
      const { status, body } = await feedback(globex.keys.test.secret, { decisionId: labelled.decisionId, actualOutcome });
      expect(status).toBe(200);
      expect(Object.keys(body.data.adjustments).length, actualOutcome).toBeGreaterThan(0);
      expect(body.data.adjustments, actualOutcome).not.toHaveProperty("amount");
    }
  });

  it("answers 404 for unknown decisions and for those of another account or environment", async () => {
    const made = await decide(acme.keys.live.secret, { ...fraudPattern(92), userId: "live_only" });
    for (const [key, body] of [
      [acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "fraud" }],
      [globex.keys.live.secret, { evidenceId: made.evidenceId, actualOutcome: "fraud" }],
      [globex.keys.live.secret, { userId: "live_only", actualOutcome: "fraud" }],
      [acme.keys.live.secret, { decisionId: "dec_doesnotexist0000000000", actualOutcome: "fraud" }],
    ] as const) {
      const { status, body: answer } = await feedback(key, body);
      expect(status).toBe(404);
      expect(answer.error.code).toBe("NOT_FOUND");
      expect(answer.error.message).toMatch(/^no decision/);
    }
  });

  it("refuses identifiers that name different decisions, and input outside the contract", async () => {
    const one = await decide(acme.keys.test.secret, { ...fraudPattern(93), userId: "mismatch_a" });
    const other = await decide(acme.keys.test.secret, { ...fraudPattern(94), userId: "mismatch_b" });
    const mixed = await feedback(acme.keys.test.secret, { decisionId: one.decisionId, evidenceId: other.evidenceId, actualOutcome: "fraud" });
    expect(mixed.status).toBe(400);
    expect(mixed.body.error.details.fieldViolations?.map((v) => v.field)).toEqual(["evidenceId"]);
    for (const body of [
      { actualOutcome: "fraud" },
      { userId: "u", actualOutcome: "stolen" },
      { userId: "u", actualOutcome: "fraud", confidence: 1.5 },
      { userId: "u", actualOutcome: "fraud", confidence: -0.1 },
      { userId: "u", actualOutcome: "fraud", notes: "x".repeat(1001) },
    ]) {
      const { status, body: answer } = await feedback(acme.keys.test.secret, body);
      expect(status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(answer.error.code).toBe("VALIDATION_ERROR");
    }
    // The limits themselves are allowed: notes of exactly 1,000 characters, confidence 0.
    const bounded = await decide(acme.keys.test.secret, { ...fraudPattern(96), userId: "at_the_limits" });
    const atLimits = await feedback(acme.keys.test.secret, { decisionId: bounded.decisionId, actualOutcome: "legitimate", confidence: 0, notes: "x".repeat(1000) });
    expect(atLimits.status).toBe(200);
  });

  it("lets a later label replace the earlier one without shifting the weights twice", async () => {
    const made = await decide(acme.keys.test.secret, { ...fraudPattern(95), userId: "relabelled" });
    const first = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(first.body.data.weightsVersionAfter).toBe(first.body.data.weightsVersionBefore + 1);
    const second = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "legitimate" });
    expect(second.body.data).toMatchObject({ replacedPrevious: true, adjustments: {}, graphUpdated: true });
    expect(second.body.data.weightsVersionAfter).toBe(second.body.data.weightsVersionBefore);
    expect(second.body.data.weightsVersionBefore).toBe(first.body.data.weightsVersionAfter);
    // The legitimate label took the fraud labels off the decision's entities.
    const labels = server.app.db.prepare("SELECT COUNT(*) AS n FROM graph_labels WHERE decision_id = ?").get(made.decisionId) as { n: number };
    expect(labels.n).toBe(0);
    // A label repeated changes nothing in the graph, and says so.
    const third = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "valid" });
    expect(third.body.data).toMatchObject({ replacedPrevious: true, graphUpdated: false });
    const fraudAgain = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(fraudAgain.body.data.graphUpdated).toBe(true);
    const fraudOnceMore = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "chargeback" });
    expect(fraudOnceMore.body.data.graphUpdated).toBe(false);
  });

  it("leaves the weights' move to the next label when a label with confidence 0 moved nothing", async () => {
    const made = await decide(acme.keys.test.secret, { ...fraudPattern(89), userId: "unsure" });
    const unsure = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "fraud", confidence: 0 });
    expect(unsure.body.data).toMatchObject({ adjustments: {}, replacedPrevious: false });
    expect(unsure.body.data.weightsVersionAfter).toBe(unsure.body.data.weightsVersionBefore);
    const sure = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "fraud", confidence: 1 });
    expect(sure.body.data.replacedPrevious).toBe(true);
    expect(sure.body.data.weightsVersionAfter).toBe(sure.body.data.weightsVersionBefore + 1);
    expect(Object.keys(sure.body.data.adjustments).length).toBeGreaterThan(0);
    // That was the decision's move: the next label moves nothing.
    const again = await feedback(acme.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "legitimate" });
    expect(again.body.data).toMatchObject({ adjustments: {}, weightsVersionAfter: again.body.data.weightsVersionBefore });
    // Nor does a label whose move would be too small to show: no new version, and the move left to the next.
    const other = await decide(acme.keys.test.secret, { ...fraudPattern(89), userId: "barely_sure" });
    const barely = await feedback(acme.keys.test.secret, { decisionId: other.decisionId, actualOutcome: "legitimate", confidence: 0.000001 });
    expect(barely.body.data).toMatchObject({ adjustments: {}, weightsVersionAfter: barely.body.data.weightsVersionBefore });
    const surer = await feedback(acme.keys.test.secret, { decisionId: other.decisionId, actualOutcome: "legitimate", confidence: 1 });
    expect(surer.body.data.weightsVersionAfter).toBe(surer.body.data.weightsVersionBefore + 1);
  });

  it("refuses feedback on tampered evidence with EVIDENCE_TAMPERED and records the refusal in the audit log", async () => {
    const made = await decide(acme.keys.test.secret, { ...fraudPattern(96), userId: "tampered" });
    server.app.db.prepare("UPDATE evidence SET content = replace(content, '\"score\":', '\"score\":1') WHERE id = ?").run(made.evidenceId);
    const { status, body } = await feedback(acme.keys.test.secret, { evidenceId: made.evidenceId, actualOutcome: "fraud" });
    expect(status).toBe(409);
    expect(body.error.code).toBe("EVIDENCE_TAMPERED");
    expect(body.error.message).toContain(made.decisionId);
    const entry = server.app.db.prepare("SELECT * FROM audit_log WHERE action = 'evidence.tampered' AND subject = ?").get(made.decisionId) as { account_id: string; body: string } | undefined;
    expect(entry?.account_id).toBe(acme.account.id);
    expect(JSON.parse(entry?.body ?? "{}")).toMatchObject({ data: { evidenceId: made.evidenceId, problem: "the evidence content does not match its integrity hash" } });
    // A changed decision row with intact evidence is caught too.
    const other = await decide(acme.keys.test.secret, { ...fraudPattern(97), userId: "rescored" });
    server.app.db.prepare("UPDATE decisions SET score = 1, decision = 'allow' WHERE id = ?").run(other.decisionId);
    expect((await feedback(acme.keys.test.secret, { decisionId: other.decisionId, actualOutcome: "fraud" })).body.error.code).toBe("EVIDENCE_TAMPERED");
    const stored = server.app.db.prepare("SELECT COUNT(*) AS n FROM feedback WHERE decision_id IN (?, ?)").get(made.decisionId, other.decisionId) as { n: number };
    expect(stored.n).toBe(0);
  });

  it("refuses feedback on a decision row whose reasons, request or confidence were changed, its evidence intact", async () => {
    const key = acme.keys.test.secret;
    const edits: Array<[string, string, string]> = [
      // The reasons are in both: the signed entry, checked first, catches them.
      ["reasons", "UPDATE decisions SET record = json_set(record, '$.reasons', json('[\"LOW_RISK\"]')) WHERE id = ?", "the decision record disagrees with its signed audit entry on reasons"],
      ["request", "UPDATE decisions SET record = json_set(record, '$.request.ip', '9.9.9.9') WHERE id = ?", "the decision record disagrees with its evidence"],
      // No evidence holds the confidence: the decision's signed audit entry does.
      ["confidence", "UPDATE decisions SET confidence = 0.99 WHERE id = ?", "the decision record disagrees with its signed audit entry on confidence"],
    ];
    for (const [field, edit, problem] of edits) {
      const made = await decide(key, { ...fraudPattern(95), userId: `edited_${field}` });
      await server.app.settled();
      server.app.db.prepare(edit).run(made.decisionId);
      const refused = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
      expect(refused.status, field).toBe(409);
      expect(refused.body.error, field).toMatchObject({ code: "EVIDENCE_TAMPERED", message: expect.stringContaining(problem) });
    }
    // An untouched one is taken.
    const intact = await decide(key, { ...fraudPattern(95), userId: "edited_none" });
    await server.app.settled();
    expect((await feedback(key, { decisionId: intact.decisionId, actualOutcome: "fraud" })).status).toBe(200);
  });

  it("refuses evidence rewritten together with its hash: the decision's signed audit entry recorded the original", async () => {
    const key = acme.keys.test.secret;
    const made = await decide(key, { ...fraudPattern(90), userId: "rewritten" });
    await server.app.settled();
    const row = server.app.db.prepare("SELECT content FROM evidence WHERE id = ?").get(made.evidenceId) as { content: string };
    // Someone with write access to the database points the evidence at a victim and fixes up the hash.
    const forged = canonicalJson({ ...(JSON.parse(row.content) as Record<string, unknown>), request: { userId: "rewritten", action: "signup", email: "victim@example.com" } });
    server.app.db.prepare("UPDATE evidence SET content = ?, integrity_hash = ? WHERE id = ?").run(forged, sha256Hex(forged), made.evidenceId);
    const refused = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: "EVIDENCE_TAMPERED", message: expect.stringContaining("not the one the decision's signed audit entry recorded") });

    // Rewriting the audit entry too (its recorded hash, and the entry's own hash) breaks its signature.
    const entry = server.app.db.prepare("SELECT seq, prev_hash, body FROM audit_log WHERE action = 'decision.made' AND subject = ?").get(made.decisionId) as { seq: number; prev_hash: string; body: string };
    const body = JSON.parse(entry.body) as { data: { evidenceIntegrityHash: string } };
    expect(body.data.evidenceIntegrityHash).toMatch(/^[0-9a-f]{64}$/);
    const rewritten = canonicalJson({ ...body, data: { ...body.data, evidenceIntegrityHash: sha256Hex(forged) } });
    tamperWithAuditLog(() => server.app.db.prepare("UPDATE audit_log SET body = ?, hash = ? WHERE seq = ?").run(rewritten, entryHash(entry.prev_hash, rewritten), entry.seq));
    const again = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(again.body.error).toMatchObject({ code: "EVIDENCE_TAMPERED", message: expect.stringContaining("audit entry is not authentic") });
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM feedback WHERE decision_id = ?").get(made.decisionId)).toEqual({ n: 0 });
  });

  it("waits for a decision's audit entry, and answers 409 without changing anything when there is none", async () => {
    const key = acme.keys.test.secret;
    // Straight after the answer, before its follow-up has written the entry: the feedback waits for it.
    const fresh = await decide(key, { ...fraudPattern(91), userId: "fresh" });
    expect((await feedback(key, { decisionId: fresh.decisionId, actualOutcome: "fraud" })).status).toBe(200);
    const orphan = await decide(key, { ...fraudPattern(92), userId: "orphan" });
    await server.app.settled();
    tamperWithAuditLog(() => server.app.db.prepare("DELETE FROM audit_log WHERE action = 'decision.made' AND subject = ?").run(orphan.decisionId));
    const refused = await feedback(key, { decisionId: orphan.decisionId, actualOutcome: "fraud" });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: "CONFLICT", message: expect.stringContaining(`decision ${orphan.decisionId} has no signed audit entry yet`) });
    // Long after its decision the entry is no longer on its way: it is missing, and that is tampering.
    clock.advance(ENTRY_GRACE_MS);
    const missing = await feedback(key, { decisionId: orphan.decisionId, actualOutcome: "fraud" });
    expect(missing.body.error).toMatchObject({ code: "EVIDENCE_TAMPERED", message: expect.stringContaining("the decision's signed audit entry is missing") });
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM audit_log WHERE action = 'evidence.tampered' AND subject = ?").get(orphan.decisionId)).toEqual({ n: 1 });
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM feedback WHERE decision_id = ?").get(orphan.decisionId)).toEqual({ n: 0 });

    // An old decision whose follow-up is still to run (as after a crash), or failed for good: not tampering.
    const delayed = await decide(key, { ...fraudPattern(87), userId: "delayed" });
    await server.app.settled();
    tamperWithAuditLog(() => server.app.db.prepare("DELETE FROM audit_log WHERE action = 'decision.made' AND subject = ?").run(delayed.decisionId));
    const task = server.app.db
      .prepare("INSERT INTO outbox (kind, account_id, environment, payload, status, next_attempt_at, created_at, updated_at) VALUES ('decision.follow-up', ?, 'test', ?, 'pending', ?, 0, 0)")
      .run(acme.account.id, JSON.stringify({ followUps: [{ audit: { subject: delayed.decisionId } }] }), Number.MAX_SAFE_INTEGER);
    clock.advance(ENTRY_GRACE_MS);
    const pending = await feedback(key, { decisionId: delayed.decisionId, actualOutcome: "fraud" });
    expect(pending.body.error).toMatchObject({ code: "CONFLICT", message: expect.stringContaining("it follows the decision within seconds") });
    server.app.db.prepare("UPDATE outbox SET status = 'dead' WHERE id = ?").run(task.lastInsertRowid);
    const dead = await feedback(key, { decisionId: delayed.decisionId, actualOutcome: "fraud" });
    expect(dead.body.error).toMatchObject({ code: "CONFLICT", message: expect.stringContaining("its follow-up failed and waits in the dead-letter queue") });
    // Unlike other dead letters it outlives the retention: its absence would read as tampering.
    server.app.outbox.enqueue("other.kind", { accountId: acme.account.id, environment: "test" }, {});
    server.app.db.prepare("UPDATE outbox SET status = 'dead', updated_at = 0 WHERE kind = 'other.kind'").run();
    expect(await server.app.outbox.pruneDeadLetters(clock.now() + DEAD_LETTER_RETENTION_MS)).toBe(1);
    const stillDead = await feedback(key, { decisionId: delayed.decisionId, actualOutcome: "fraud" });
    expect(stillDead.body.error).toMatchObject({ code: "CONFLICT", message: expect.stringContaining("its follow-up failed and waits in the dead-letter queue") });
    server.app.db.prepare("DELETE FROM outbox WHERE id = ?").run(task.lastInsertRowid);
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM audit_log WHERE action = 'evidence.tampered' AND subject = ?").get(delayed.decisionId)).toEqual({ n: 0 });
  });

  it("refuses a decision moved into another tenant's rows: its signed entry names its own account", async () => {
    const victim = server.createAccount("Victim");
    const made = await decide(acme.keys.test.secret, { ...fraudPattern(88), userId: "moved" });
    await server.app.settled();
    server.app.db.prepare("UPDATE decisions SET account_id = ? WHERE id = ?").run(victim.account.id, made.decisionId);
    server.app.db.prepare("UPDATE evidence SET account_id = ? WHERE decision_id = ?").run(victim.account.id, made.decisionId);
    const refused = await feedback(victim.keys.test.secret, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(refused.body.error).toMatchObject({ code: "EVIDENCE_TAMPERED", message: expect.stringContaining("belongs to another account or environment") });
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM graph_labels WHERE account_id = ?").get(victim.account.id)).toEqual({ n: 0 });
  });

  it("answers 429 with Retry-After past 50 submissions an hour per account and environment", async () => {
    const limited = server.createAccount("Limited");
    const made = await decide(limited.keys.live.secret, { ...fraudPattern(98), userId: "limited" });
    // Refused as invalid by the handler (the identifiers name different decisions): these use up nothing.
    for (let i = 0; i < 5; i++) {
      const mismatched = await feedback(limited.keys.live.secret, { decisionId: made.decisionId, userId: "someone_else", actualOutcome: "fraud" });
      expect(mismatched.body.error.code).toBe("VALIDATION_ERROR");
      expect(mismatched.headers.get("ratelimit")).toMatch(/^"feedback_hourly";r=50;/);
    }
    let last = await feedback(limited.keys.live.secret, { decisionId: made.decisionId, actualOutcome: "fraud" });
    for (let i = 1; i < 50; i++) last = await feedback(limited.keys.live.secret, { decisionId: made.decisionId, actualOutcome: i % 2 ? "legitimate" : "fraud" });
    expect(last.status).toBe(200);
    // A second key of the same account and environment shares the limit.
    const secondKey = server.app.keys.issue({ accountId: limited.account.id, environment: "live", kind: "secret" }).key;
    const refused = await feedback(secondKey, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe("RATE_LIMIT_EXCEEDED");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    // The test environment has its own budget.
    const testDecision = await decide(limited.keys.test.secret, { ...fraudPattern(99), userId: "limited" });
    expect((await feedback(limited.keys.test.secret, { decisionId: testDecision.decisionId, actualOutcome: "fraud" })).status).toBe(200);
  });

  it("answers 429 past 200 submissions a day, even when every hour stayed under 50", async () => {
    // Start early in a UTC day, so the whole run falls in one daily window.
    clock.advance(DAY - (clock.now() % DAY) + HOUR);
    const daily = server.createAccount("Daily");
    const key = daily.keys.live.secret;
    const made = await decide(key, { ...fraudPattern(97), userId: "daily" });
    for (let hour = 0; hour < 4; hour++) {
      for (let i = 0; i < 50; i++) {
        expect((await feedback(key, { decisionId: made.decisionId, actualOutcome: i % 2 ? "legitimate" : "fraud" })).status).toBe(200);
      }
      // Two hours later the hourly window is empty again.
      clock.advance(2 * HOUR);
    }
    const refused = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit-policy")).toContain('"feedback_daily";q=200;w=86400');
    expect(refused.headers.get("ratelimit")).toMatch(/"feedback_daily";r=0;/);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(3600);
  });
});

describe("a challenge the user passed", () => {
  /**
   * An account that challenges whoever comes from a new country or on a new device, and a user of it known at
   * home, challenged two days later paying from abroad on another device.
   */
  async function challengedAbroad(accountName: string, userId: string, deviceId: string, ip = "1.128.0.1") {
    const account = server.createAccount(accountName);
    const key = account.keys.live.secret;
    const policy = await call<{ id: string }>(key, "POST", "/api/v1/policies", {
      name: "Step up on the unknown",
      status: "active",
      priority: 100,
      rules: [{ condition: "signals.history.newCountry || signals.history.newDevice", action: "challenge" }],
    });
    expect(policy.status).toBe(201);
    const home = { userId, action: "login", ...HUMAN_DESKTOP, ip: "81.2.69.160", deviceId: "dev-home" };
    expect((await decide(key, home)).decision).toBe("allow");
    clock.advance(2 * DAY);
    const abroad = { ...home, action: "purchase", amount: 50, currency: "EUR", ip, deviceId };
    const challenged = await decide(key, abroad);
    expect(challenged.decision).toBe("challenge");
    return { account, key, abroad, challenged };
  }

  it("teaches the user's profile once labelled legitimate, so the next request from there is not new", async () => {
    const { account: traveller, key, abroad, challenged } = await challengedAbroad("Travel agency", "globetrotter", "dev-hotel");
    // Not passed yet: still new.
    expect((await decide(key, abroad)).decision).toBe("challenge");
    const labelled = await feedback(key, { decisionId: challenged.decisionId, actualOutcome: "legitimate" });
    expect(labelled.status).toBe(200);
    // Relabelled fraud, then legitimate again: it taught the profile once (its payment counted once).
    expect((await feedback(key, { decisionId: challenged.decisionId, actualOutcome: "fraud" })).status).toBe(200);
    expect((await feedback(key, { decisionId: challenged.decisionId, actualOutcome: "legitimate" })).status).toBe(200);
    const profile = server.app.db.prepare("SELECT amounts FROM user_profiles WHERE account_id = ? AND user_id = ?").get(traveller.account.id, "globetrotter") as { amounts: string };
    expect(JSON.parse(profile.amounts)).toEqual({ EUR: { count: 1, max: 50, mean: 50 } });
    const after = await decide(key, abroad);
    expect(after.decision).toBe("allow");
  });

  it("teaches the device but not the country of a datacenter address: that country is the cloud VM's or VPN's, not the user's", async () => {
    // 3.85.10.10: AWS us-east-1, in the server's datacenter ranges, US per the geolocation database.
    const { account: agency, key, challenged } = await challengedAbroad("VPN agency", "tunneller", "dev-tunnel", "3.85.10.10");
    expect((await feedback(key, { decisionId: challenged.decisionId, actualOutcome: "legitimate" })).status).toBe(200);
    const profile = server.app.db
      .prepare("SELECT last_country, known_countries, known_devices FROM user_profiles WHERE account_id = ? AND user_id = ?")
      .get(agency.account.id, "tunneller") as { last_country: string; known_countries: string; known_devices: string };
    expect(profile.last_country).toBe("GB");
    expect(JSON.parse(profile.known_countries)).toEqual(["GB"]);
    expect(JSON.parse(profile.known_devices)).toEqual(["dev-tunnel", "dev-home"]);
  });

  it("learns nothing from a legitimate label its sender is less than half sure of, and waits for a sure one", async () => {
    const { account: agency, key, abroad, challenged } = await challengedAbroad("Unsure agency", "hesitant", "dev-unknown");
    // "Maybe legitimate": the device and country stay unknown (an attacker's device would otherwise be the user's for good).
    expect((await feedback(key, { decisionId: challenged.decisionId, actualOutcome: "legitimate", confidence: 0.1 })).status).toBe(200);
    expect((await decide(key, abroad)).decision).toBe("challenge");
    // A sure label later teaches it, once.
    expect((await feedback(key, { decisionId: challenged.decisionId, actualOutcome: "valid", confidence: 0.9 })).status).toBe(200);
    const profile = server.app.db.prepare("SELECT amounts FROM user_profiles WHERE account_id = ? AND user_id = ?").get(agency.account.id, "hesitant") as { amounts: string };
    expect(JSON.parse(profile.amounts)).toEqual({ EUR: { count: 1, max: 50, mean: 50 } });
    expect((await decide(key, abroad)).decision).toBe("allow");
  });
});

describe("learning from a stream of labels", () => {
  it("scores later decisions of the fraud pattern higher and of the legitimate pattern lower", async () => {
    const learner = server.createAccount("Learner");
    const key = learner.keys.live.secret;
    const fraudBefore = await decide(key, fraudPattern(0));
    const legitBefore = await decide(key, legitimatePattern(0));
    for (let i = 1; i <= 12; i++) {
      clock.advance(HOUR);
      const fraud = await decide(key, fraudPattern(i));
      expect((await feedback(key, { decisionId: fraud.decisionId, actualOutcome: i % 3 === 0 ? "chargeback" : "fraud" })).status).toBe(200);
      const legit = await decide(key, legitimatePattern(i));
      expect((await feedback(key, { decisionId: legit.decisionId, actualOutcome: i % 3 === 0 ? "valid" : "legitimate", confidence: 0.9 })).status).toBe(200);
    }
    clock.advance(HOUR);
    const fraudAfter = await decide(key, fraudPattern(50));
    const legitAfter = await decide(key, legitimatePattern(50));
    expect(fraudAfter.score).toBeGreaterThan(fraudBefore.score + 10);
    expect(legitAfter.score).toBeLessThan(legitBefore.score);
    // Fresh entities each time: the change is the weights', not the graph's.
    expect(fraudAfter.reasons).not.toContain("FRAUD_GRAPH_LINK");
    const weights = server.app.db.prepare("SELECT version, weights FROM category_weights WHERE account_id = ? AND environment = 'live'").get(learner.account.id) as { version: number; weights: string };
    expect(weights.version).toBeGreaterThan(1);
    expect(validateWeights({ version: weights.version, weights: JSON.parse(weights.weights) as unknown }).ok).toBe(true);
  });
});

describe("the fraud graph", () => {
  it("raises the graph signal for a new user on a fraudster's device (one hop) and next to one (two hops)", async () => {
    const ring = server.createAccount("Ring");
    const key = ring.keys.live.secret;
    const base = { action: "checkout", amount: 120, currency: "EUR", ...HUMAN_DESKTOP };
    const fraudster = await decide(key, { ...base, userId: "mallory", deviceId: "dev_x", ip: "81.2.69.200", email: "mallory@example.com", metadata: { cardFingerprint: "card_m1" } });
    clock.advance(HOUR);
    // Mallory also used another device, with a card: this decision is not labelled itself.
    await decide(key, { ...base, userId: "mallory", deviceId: "dev_y", ip: "81.2.69.201", metadata: { cardFingerprint: "card_m2" } });
    clock.advance(HOUR);
    const labelled = await feedback(key, { decisionId: fraudster.decisionId, actualOutcome: "fraud" });
    expect(labelled.body.data.graphUpdated).toBe(true);

    clock.advance(HOUR);
    const control = await decide(key, { ...base, userId: "newcomer_control", deviceId: "dev_fresh", ip: "81.2.69.202" });
    const onDevice = await decide(key, { ...base, userId: "newcomer_1", deviceId: "dev_x", ip: "81.2.69.203" });
    const onCard = await decide(key, { ...base, userId: "newcomer_2", deviceId: "dev_z", ip: "81.2.69.204", metadata: { cardFingerprint: "card_m2" } });

    expect((await signalsOf(key, control.decisionId)).graph).toEqual({ available: true, linkedToFraud: false, hops: null, fraudNeighbours: 0 });
    expect((await signalsOf(key, onDevice.decisionId)).graph).toMatchObject({ available: true, linkedToFraud: true, hops: 1 });
    expect(onDevice.reasons).toContain("FRAUD_GRAPH_LINK");
    expect(onDevice.score).toBeGreaterThan(control.score + 30);
    // card_m2 was used together with mallory (fraud-labelled) in the unlabelled decision: two hops.
    expect((await signalsOf(key, onCard.decisionId)).graph).toMatchObject({ linkedToFraud: true, hops: 2 });
    expect(onCard.reasons).toContain("FRAUD_GRAPH_LINK");
    expect(onCard.score).toBeGreaterThan(control.score);
    expect(onCard.score).toBeLessThan(onDevice.score);

    // Another account's graph is its own.
    const outsider = await decide(globex.keys.live.secret, { ...base, userId: "newcomer_3", deviceId: "dev_x", ip: "81.2.69.205" });
    expect((await signalsOf(globex.keys.live.secret, outsider.decisionId)).graph.linkedToFraud).toBe(false);
  });

  it("joins nothing on an address that is not public: the backend's own, when decides leave ip out", async () => {
    const backend = server.createAccount("Backend", { decide: 1000 });
    const key = backend.keys.live.secret;
    expect((await call(key, "PUT", "/api/v1/lists/auto_ips", { kind: "ip", type: "deny", automatic: true })).status).toBe(201);
    type Velocity = { velocity: { ip: { lastMinute: number; lastDay: number }; usersPerIp24h: number } };
    const velocityOf = async (decisionId: string) =>
      (await call<{ data: { signals: Velocity } }>(key, "GET", `/api/v1/decisions/${decisionId}`)).body.data.signals.velocity;
    // Twelve customers served by one backend that sends no ip: each decide comes from 127.0.0.1.
    const made = [];
    for (let i = 0; i < 12; i++) {
      made.push(await decide(key, { userId: `customer_${i}`, action: "login", deviceId: `dev_customer_${i}`, email: `customer${i}@example.com`, ...HUMAN_DESKTOP }));
    }
    const fraud = await feedback(key, { decisionId: made[0]?.decisionId, actualOutcome: "fraud" });
    expect(fraud.status).toBe(200);
    expect(server.app.db.prepare("SELECT value FROM list_entries WHERE account_id = ? AND list_name = 'auto_ips'").all(backend.account.id)).toEqual([]);

    clock.advance(HOUR);
    const next = await decide(key, { userId: "customer_next", action: "login", deviceId: "dev_customer_next", email: "next@example.com", ...HUMAN_DESKTOP });
    expect((await signalsOf(key, next.decisionId)).graph).toMatchObject({ linkedToFraud: false, hops: null });
    expect(await velocityOf(next.decisionId)).toMatchObject({ ip: { lastMinute: 0, lastDay: 0 }, usersPerIp24h: 0 });
    expect(next.reasons.filter((reason) => reason.startsWith("VELOCITY") || reason === "FRAUD_GRAPH_LINK" || reason === "DENYLISTED")).toEqual([]);

    // A public address shared by customers is counted, and links them.
    for (let i = 0; i < 3; i++) {
      await decide(key, { userId: `office_${i}`, action: "login", deviceId: `dev_office_${i}`, ip: "81.2.69.230", ...HUMAN_DESKTOP });
    }
    const office = await decide(key, { userId: "office_3", action: "login", deviceId: "dev_office_3", ip: "81.2.69.230", ...HUMAN_DESKTOP });
    // Three decides before this one; four users with this one.
    expect(await velocityOf(office.decisionId)).toMatchObject({ ip: { lastMinute: 3 }, usersPerIp24h: 4 });
  });

  it("feeds fraud-labelled entities into the account's automatic deny lists", async () => {
    const shop = server.createAccount("Shop");
    const key = shop.keys.live.secret;
    for (const [name, kind] of [["auto_devices", "device"], ["auto_emails", "email"]] as const) {
      const put = await call(key, "PUT", `/api/v1/lists/${name}`, { kind, type: "deny", automatic: true });
      expect(put.status).toBe(201);
    }
    await call(key, "PUT", "/api/v1/lists/manual_users", { kind: "user", type: "deny", automatic: false });
    const made = await decide(key, { userId: "eve", action: "signup", email: "Eve@Example.com", deviceId: "dev_eve", ip: "81.2.69.210", ...HUMAN_DESKTOP });
    expect(made.reasons).not.toContain("DENYLISTED");
    await feedback(key, { decisionId: made.decisionId, actualOutcome: "abuse" });

    const entries = (name: string) => server.app.db.prepare("SELECT value FROM list_entries WHERE account_id = ? AND list_name = ?").all(shop.account.id, name) as Array<{ value: string }>;
    expect(entries("auto_devices")).toEqual([{ value: "dev_eve" }]);
    expect(entries("auto_emails")).toEqual([{ value: "eve@example.com" }]);
    expect(entries("manual_users")).toEqual([]);
    const audit = server.app.db.prepare("SELECT body FROM audit_log WHERE action = 'feedback.received' AND account_id = ?").get(shop.account.id) as { body: string };
    expect(JSON.parse(audit.body).data.listEntriesAdded).toEqual([
      { list: "auto_devices", value: "dev_eve" },
      { list: "auto_emails", value: "eve@example.com" },
    ]);

    // The next decision sees the entry at once (the policy cache was invalidated).
    const again = await decide(key, { userId: "eve_2", action: "signup", email: "other@example.com", deviceId: "dev_eve", ip: "81.2.69.211", ...HUMAN_DESKTOP });
    expect(again.reasons).toContain("DENYLISTED");
    expect(again.decision).toBe("deny");
  });

  it("leaves what a person did to an automatic list: a removal outlives a repeated label, an expiry stays", async () => {
    const shop = server.createAccount("Reviewed shop");
    const key = shop.keys.live.secret;
    for (const [name, kind] of [["auto_devices", "device"], ["auto_emails", "email"]] as const) {
      expect((await call(key, "PUT", `/api/v1/lists/${name}`, { kind, type: "deny", automatic: true })).status).toBe(201);
    }
    const expiresAt = new Date(clock.now() + 3_600_000).toISOString();
    expect((await call(key, "POST", "/api/v1/lists/auto_emails/entries", { entries: [{ value: "temp@example.com", expiresAt }] })).status).toBe(200);
    const made = await decide(key, { userId: "k1", action: "login", email: "temp@example.com", deviceId: "dev_k1", ip: "81.2.69.61", ...HUMAN_DESKTOP });
    await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    const entries = (name: string) => server.app.db.prepare("SELECT value, expires_at AS expiresAt FROM list_entries WHERE account_id = ? AND list_name = ?").all(shop.account.id, name);
    // The e-mail was listed already, until an hour from now: it keeps that expiry, and the label did not add it.
    expect(entries("auto_emails")).toEqual([{ value: "temp@example.com", expiresAt: Date.parse(expiresAt) }]);
    const audit = server.app.db.prepare("SELECT body FROM audit_log WHERE action = 'feedback.received' AND account_id = ?").get(shop.account.id) as { body: string };
    expect(JSON.parse(audit.body).data.listEntriesAdded).toEqual([{ list: "auto_devices", value: "dev_k1" }]);

    // An analyst removes the device; the same label sent again (a retry) does not put it back.
    expect((await call<{ data: { removed: number } }>(key, "POST", "/api/v1/lists/auto_devices/remove", { values: ["dev_k1"] })).body.data.removed).toBe(1);
    const repeated = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(repeated.body.data).toMatchObject({ replacedPrevious: true, consortiumShared: false });
    expect(entries("auto_devices")).toEqual([]);
    // A fraud label after a legitimate one is news again: it adds.
    await feedback(key, { decisionId: made.decisionId, actualOutcome: "legitimate" });
    await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect(entries("auto_devices")).toEqual([{ value: "dev_k1", expiresAt: null }]);
    // An unsure label in between says nothing new (not even an unsure legitimate one): the next sure fraud label
    // follows the last sure one, a fraud label, and does not put back what the analyst removed again.
    expect((await call<{ data: { removed: number } }>(key, "POST", "/api/v1/lists/auto_devices/remove", { values: ["dev_k1"] })).body.data.removed).toBe(1);
    for (const unsure of [{ actualOutcome: "fraud", confidence: 0.3 }, { actualOutcome: "legitimate", confidence: 0.2 }]) {
      await feedback(key, { decisionId: made.decisionId, ...unsure });
      const sure = await feedback(key, { decisionId: made.decisionId, actualOutcome: "chargeback" });
      expect(sure.body.data, JSON.stringify(unsure)).toMatchObject({ replacedPrevious: true, consortiumShared: false });
      expect(entries("auto_devices"), JSON.stringify(unsure)).toEqual([]);
    }
  });

  it("takes the label stored last as the decision's label, even when the clock stepped back in between", async () => {
    const shop = server.createAccount("Shop with a stepping clock");
    const key = shop.keys.live.secret;
    expect((await call(key, "PUT", "/api/v1/lists/auto_devices", { kind: "device", type: "deny", automatic: true })).status).toBe(201);
    const made = await decide(key, { userId: "k2", action: "login", deviceId: "dev_k2", ip: "81.2.69.62", ...HUMAN_DESKTOP });
    await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    expect((await call<{ data: { removed: number } }>(key, "POST", "/api/v1/lists/auto_devices/remove", { values: ["dev_k2"] })).body.data.removed).toBe(1);
    // The system clock is set back a minute (a time server's correction): the labels that follow are still the latest.
    clock.advance(-60_000);
    try {
      await feedback(key, { decisionId: made.decisionId, actualOutcome: "legitimate" });
      // A fraud label after a legitimate one is news again: it adds.
      const again = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
      expect(again.body.data.graphUpdated).toBe(true);
      const entries = server.app.db.prepare("SELECT value FROM list_entries WHERE account_id = ? AND list_name = 'auto_devices'").all(shop.account.id);
      expect(entries).toEqual([{ value: "dev_k2" }]);
    } finally {
      clock.advance(60_000);
    }
  });

  it("puts back an automatic entry that expired (not yet pruned) and denies by it at once", async () => {
    const shop = server.createAccount("Returning shop");
    const key = shop.keys.live.secret;
    expect((await call(key, "PUT", "/api/v1/lists/auto_users", { kind: "user", type: "deny", automatic: true })).status).toBe(201);
    const expiresAt = new Date(clock.now() + 60_000).toISOString();
    expect((await call(key, "POST", "/api/v1/lists/auto_users/entries", { entries: [{ value: "victim", expiresAt }] })).status).toBe(200);
    expect((await decide(key, { userId: "victim", action: "login", ip: "81.2.69.60", ...HUMAN_DESKTOP })).reasons).toContain("DENYLISTED");
    clock.advance(61_000);
    const made = await decide(key, { userId: "victim", action: "login", ip: "81.2.69.60", ...HUMAN_DESKTOP });
    expect(made.reasons).not.toContain("DENYLISTED");

    await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" });
    const audit = server.app.db.prepare("SELECT body FROM audit_log WHERE action = 'feedback.received' AND account_id = ?").get(shop.account.id) as { body: string };
    expect(JSON.parse(audit.body).data.listEntriesAdded).toEqual([{ list: "auto_users", value: "victim" }]);
    const again = await decide(key, { userId: "victim", action: "login", ip: "81.2.69.60", ...HUMAN_DESKTOP });
    expect(again.reasons).toContain("DENYLISTED");
    expect(again.decision).toBe("deny");
  });

  it("marks no entity on a fraud label the client is less than half sure of", async () => {
    const shop = server.createAccount("Unsure shop");
    const key = shop.keys.live.secret;
    expect((await call(key, "PUT", "/api/v1/lists/auto_emails", { kind: "email", type: "deny", automatic: true })).status).toBe(201);
    const entries = () => server.app.db.prepare("SELECT value FROM list_entries WHERE account_id = ? AND list_name = 'auto_emails'").all(shop.account.id) as Array<{ value: string }>;
    const made = await decide(key, { userId: "maybe", action: "login", email: "maybe@example.org", deviceId: "dev_maybe", ip: "81.2.69.50", ...HUMAN_DESKTOP });
    for (const confidence of [0, 0.49]) {
      const unsure = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud", confidence });
      expect(unsure.status).toBe(200);
      expect(unsure.body.data).toMatchObject({ graphUpdated: false, consortiumShared: false });
      expect(entries()).toEqual([]);
    }
    // A stranger from the same address and device is not linked to it.
    const stranger = await decide(key, { userId: "innocent", action: "login", deviceId: "dev_maybe", ip: "81.2.69.50", ...HUMAN_DESKTOP });
    expect(stranger.reasons).not.toContain("FRAUD_GRAPH_LINK");
    // Half sure is enough.
    const sure = await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud", confidence: 0.5 });
    expect(sure.body.data.graphUpdated).toBe(true);
    expect(entries()).toEqual([{ value: "maybe@example.org" }]);
  });

  it("adds nothing to an automatic list that is full, and applies the label all the same", async () => {
    const shop = server.createAccount("Full shop");
    const key = shop.keys.live.secret;
    expect((await call(key, "PUT", "/api/v1/lists/auto_full", { kind: "device", type: "deny", automatic: true })).status).toBe(201);
    for (let from = 0; from < MAX_LIST_ENTRIES; from += 5_000) {
      const entries = Array.from({ length: 5_000 }, (_, i) => ({ value: `dev_filler_${from + i}` }));
      expect((await call(key, "POST", "/api/v1/lists/auto_full/entries", { entries })).status).toBe(200);
    }
    const made = await decide(key, { userId: "mallory_full", action: "signup", deviceId: "dev_one_too_many", ip: "81.2.69.212", ...HUMAN_DESKTOP });
    expect((await feedback(key, { decisionId: made.decisionId, actualOutcome: "fraud" })).status).toBe(200);
    const held = server.app.db.prepare("SELECT COUNT(*) AS n FROM list_entries WHERE account_id = ? AND list_name = 'auto_full'").get(shop.account.id) as { n: number };
    expect(held.n).toBe(MAX_LIST_ENTRIES);
  }, 60_000);
});

describe("upgrading an installation whose feedback put private addresses in automatic lists", () => {
  it("takes back what feedback added, leaves what an analyst added, and audits it", async () => {
    const dataDir = tempDir();
    const before = await startTestServer({ config: { dataDir, engineThreads: 1 } });
    const { account, keys } = before.createAccount("Upgraded");
    const tenant = { accountId: account.id, environment: "live" } as const;
    for (const list of ["auto_ips", "auto_ips_reviewed"]) {
      const put = await fetch(`${before.url}/api/v1/lists/${list}`, {
        method: "PUT",
        headers: { "content-type": "application/json", "x-api-key": keys.live.secret },
        body: JSON.stringify({ kind: "ip", type: "deny", automatic: true }),
      });
      expect(put.status).toBe(201);
    }
    // What an earlier release did: feedback added the backend's 127.0.0.1 (and a public address), as its audit
    // entry records, and 127.0.0.2 to the other list; an analyst added 10.0.0.9 by hand, and later worked on
    // the other list by hand, so which of its entries are feedback's can no longer be told.
    const entries = new ListRepository(before.app.db);
    before.app.audit.atomically(() => {
      for (const value of ["127.0.0.1", "81.2.69.1", "10.0.0.9"]) entries.putEntry(tenant, "auto_ips", { value, expiresAt: undefined }, Date.now());
      entries.putEntry(tenant, "auto_ips_reviewed", { value: "127.0.0.2", expiresAt: undefined }, Date.now());
      before.app.audit.record({
        ...tenant,
        actor: "key_earlier",
        action: "feedback.received",
        subject: "dec_earlier",
        data: { listEntriesAdded: [{ list: "auto_ips", value: "127.0.0.1" }, { list: "auto_ips", value: "81.2.69.1" }, { list: "auto_ips_reviewed", value: "127.0.0.2" }] },
      });
      before.app.audit.record({ ...tenant, actor: "key_analyst", action: "list.entries_added", subject: "auto_ips_reviewed", data: { added: 1 } });
      // An entry of a shape the repair does not expect must not stop the service from starting.
      before.app.audit.record({ ...tenant, actor: "key_odd", action: "feedback.received", subject: "dec_odd", data: { listEntriesAdded: [null, 5, { list: 7 }] } });
      // The earlier release had no record of the repair: it is still to do.
      before.app.db.prepare("DELETE FROM repairs_done").run();
    });
    await before.app.close();

    const after = await startTestServer({ config: { dataDir, engineThreads: 1 } });
    try {
      const values = (after.app.db.prepare("SELECT value FROM list_entries WHERE account_id = ? AND list_name = 'auto_ips' ORDER BY value").all(account.id) as Array<{ value: string }>).map((row) => row.value);
      expect(values).toEqual(["10.0.0.9", "81.2.69.1"]);
      expect(after.app.db.prepare("SELECT value FROM list_entries WHERE account_id = ? AND list_name = 'auto_ips_reviewed'").all(account.id)).toEqual([{ value: "127.0.0.2" }]);
      const audit = after.app.db.prepare("SELECT actor, body FROM audit_log WHERE action = 'list.entries_removed' AND account_id = ?").all(account.id) as Array<{ actor: string; body: string }>;
      expect(audit.map((row) => row.actor)).toEqual(["system"]);
      expect(JSON.parse(audit[0]?.body ?? "{}")).toMatchObject({ subject: "auto_ips", data: { removed: 1, values: "127.0.0.1" } });
      // A customer of that backend is no longer denied for its address.
      const res = await fetch(`${after.url}/api/v1/decide`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.live.secret },
        body: JSON.stringify({ userId: "honest_customer", action: "login", ...HUMAN_DESKTOP }),
      });
      expect(((await res.json()) as { data: { reasons: string[] } }).data.reasons).not.toContain("DENYLISTED");
      // Done once: an address put back later, by whoever, stays through the next start.
      new ListRepository(after.app.db).putEntry(tenant, "auto_ips", { value: "127.0.0.1", expiresAt: undefined }, Date.now());
    } finally {
      await after.app.close();
    }
    const again = await startTestServer({ config: { dataDir, engineThreads: 1 } });
    try {
      expect(again.app.db.prepare("SELECT COUNT(*) AS n FROM list_entries WHERE account_id = ? AND value = '127.0.0.1'").get(account.id)).toEqual({ n: 1 });
    } finally {
      await again.close();
    }
  });
});

