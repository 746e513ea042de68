import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditSigner } from "../src/audit/signer.js";
import { DecisionStore } from "../src/decisions/decision-store.js";
import type { DecisionDetails } from "../src/decisions/record.js";
import { DecisionWriter, prepareWrite, type DecisionWrite } from "../src/decisions/writer.js";
import { newId } from "../src/ids.js";
import { createLogger } from "../src/log.js";
import { Outbox } from "../src/outbox/outbox.js";
import { AccountRepository } from "../src/store/accounts.js";
import { DATABASE_FILE, openDatabase, type Db } from "../src/store/database.js";
import Database from "../src/store/sqlite-driver.cjs";
import { ManualClock } from "./helpers/clock.js";
import { entityKeysByKind } from "../src/graph/entities.js";

const dirs: string[] = [];
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-writer-"));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

const silent = createLogger(() => undefined);

function details(): DecisionDetails {
  return {
    request: { userId: "u", action: "login" },
    reasons: ["LOW_RISK"],
    confidencePercent: 80,
    categoryScores: {},
    contributions: [],
    weightsVersion: 1,
    policyResults: [],
    signalCoverage: "full",
    fastPathMs: 0.1,
    comprehensivePathMs: 0.2,
    processingTimeMs: 0.5,
  };
}

const policy = { triggered: [], shadowResults: [] };

function aWrite(accountId: string, now: number, overrides: Partial<DecisionWrite> = {}): DecisionWrite {
  const id = newId("dec");
  const history = overrides.history ?? { userId: "u", ip: "81.2.69.160", deviceId: "d1", email: "u@example.com", country: "GB", amount: undefined, currency: "", allowed: true };
  return {
    tenant: { accountId, environment: "live" },
    actor: "key_test",
    decision: { id, evidenceId: newId("evi"), requestId: newId("req"), userId: "u", action: "login", createdAt: now, decision: "allow", score: 5, confidence: 0.8, details: details() },
    evidence: { decisionId: id, signals: { network: { valid: true } } },
    history,
    keys: entityKeysByKind(history),
    policy,
    now,
    ...overrides,
  };
}

function count(db: Db, sql: string, ...params: unknown[]): number {
  return (db.prepare(sql).get(...params) as { n: number }).n;
}

describe("decision store (the writer thread's transaction)", () => {
  const dataDir = tempDir();
  const db = openDatabase(dataDir);
  const accountId = new AccountRepository(db).create("Acme", {}, Date.now()).id;
  const store = new DecisionStore(db, AuditSigner.loadOrCreate(dataDir));
  afterAll(() => db.close());

  it("stores a batch in one transaction, a failing write rolling back alone", () => {
    const now = Date.UTC(2026, 10, 21, 12);
    const caseId = newId("case");
    const first = aWrite(accountId, now, {});
    first.openCase = { id: caseId, decisionId: first.decision.id, userId: "u", priority: "high", score: 85, decision: "deny", reasons: ["TOR_EXIT"] };
    // The same decision id twice: the second write fails on the primary key and leaves nothing behind.
    const duplicate = aWrite(accountId, now, { decision: { ...first.decision, evidenceId: newId("evi") } });
    const third = aWrite(accountId, now + 1);
    const { results, retriedAfter } = store.write([
      prepareWrite(first, [{ kind: "event", accountId, environment: "live", lane: "", payload: '{"x":1}', at: now, now }], []),
      prepareWrite(duplicate, [{ kind: "event", accountId, environment: "live", lane: "", payload: '{"x":2}', at: now, now }], []),
      prepareWrite(third, [], []),
    ]);
    expect(results.map((r) => r.kind)).toEqual(["stored", "failed", "stored"]);
    expect(results[1]).toMatchObject({ message: expect.stringMatching(/UNIQUE/) });
    // The batch's one transaction failed first, and says so.
    expect(retriedAfter).toMatch(/UNIQUE/);
    // Before the follow-up: the decisions and one follow-up task for the two stored, no audit entry, no case yet.
    const task = db.prepare("SELECT payload FROM outbox WHERE kind = 'decision.follow-up' AND account_id = ?").all(accountId) as Array<{ payload: string }>;
    expect(task.map((row) => (JSON.parse(row.payload) as { followUps: Array<{ audit: { subject: string } }> }).followUps.map((f) => f.audit.subject))).toEqual([
      [first.decision.id, third.decision.id],
    ]);
    expect(count(db, "SELECT count(*) AS n FROM audit_log WHERE account_id = ?", accountId)).toBe(0);
    expect(store.followUp()).toEqual({ failed: 0, queuedEvents: false });

    expect(count(db, "SELECT count(*) AS n FROM decisions WHERE account_id = ?", accountId)).toBe(2);
    expect(count(db, "SELECT count(*) AS n FROM evidence WHERE account_id = ?", accountId)).toBe(2);
    expect(count(db, "SELECT count(*) AS n FROM graph_edges WHERE decision_id = ?", first.decision.id)).toBe(4);
    // The event stored with the decision; the follow-up tasks carried out and removed.
    expect(db.prepare("SELECT payload FROM outbox WHERE account_id = ?").all(accountId)).toEqual([{ payload: '{"x":1}' }]);
    // The case opened with its decision.
    expect(db.prepare("SELECT id, decision_id, status, priority, created_at FROM cases WHERE account_id = ?").all(accountId)).toEqual([
      { id: caseId, decision_id: first.decision.id, status: "open", priority: "high", created_at: now },
    ]);
    // Signed entries for each stored decision and case, stamped with the decision's time, not the writer thread's.
    const entries = db.prepare("SELECT action, subject, at, actor FROM audit_log WHERE account_id = ? ORDER BY seq").all(accountId);
    expect(entries).toEqual([
      { action: "decision.made", subject: first.decision.id, at: now, actor: "key_test" },
      { action: "case.created", subject: caseId, at: now, actor: "system" },
      { action: "decision.made", subject: third.decision.id, at: now + 1, actor: "key_test" },
    ]);
  });

  it("replays the earlier answer when an Idempotency-Key was claimed first, storing nothing", () => {
    const now = Date.UTC(2026, 10, 21, 13);
    const entry = { requestHash: "h", response: new Uint8Array([1, 2, 3]) };
    const winner = aWrite(accountId, now, { idempotency: { key: "retry-1", entry } });
    const loser = aWrite(accountId, now, { idempotency: { key: "retry-1", entry: { requestHash: "h", response: new Uint8Array([9]) } } });
    const { results } = store.write([prepareWrite(winner, [], []), prepareWrite(loser, [], [])]);
    store.followUp();
    expect(results[0]).toEqual({ kind: "stored" });
    expect(results[1]).toMatchObject({ kind: "replayed", response: { requestHash: "h" } });
    expect([...(results[1] as { response: { response: Uint8Array } }).response.response]).toEqual([1, 2, 3]);
    expect(count(db, "SELECT count(*) AS n FROM decisions WHERE id = ?", loser.decision.id)).toBe(0);
  });

  it("carries out each account's follow-ups when another account's fail, leaving that one's task for a retry", () => {
    const now = Date.UTC(2026, 10, 21, 16);
    const otherId = new AccountRepository(db).create("Globex", {}, Date.now()).id;
    const mine = aWrite(accountId, now);
    const theirs = [aWrite(otherId, now), aWrite(otherId, now + 1)];
    expect(store.write([mine, ...theirs].map((write) => prepareWrite(write, [], []))).results.map((r) => r.kind)).toEqual(["stored", "stored", "stored"]);
    // The other account's audit entries cannot be written: its group of follow-ups fails after it began.
    db.exec(`CREATE TEMP TRIGGER refuse_audit BEFORE INSERT ON audit_log WHEN NEW.account_id = '${otherId}'
             BEGIN SELECT RAISE(ABORT, 'audit refused for the test'); END`);
    try {
      expect(store.followUp()).toEqual({ failed: 2, queuedEvents: false, error: "audit refused for the test", retriedAfter: "audit refused for the test" });
    } finally {
      db.exec("DROP TRIGGER temp.refuse_audit");
    }
    expect(count(db, "SELECT count(*) AS n FROM audit_log WHERE subject = ?", mine.decision.id)).toBe(1);
    expect(count(db, "SELECT count(*) AS n FROM audit_log WHERE account_id = ?", otherId)).toBe(0);
    // Nothing of the failed group stayed, and its task did: carried out later, once.
    const followUpTasks = "SELECT count(*) AS n FROM outbox WHERE kind = 'decision.follow-up' AND account_id = ?";
    expect(count(db, followUpTasks, accountId)).toBe(0);
    expect(count(db, followUpTasks, otherId)).toBe(1);
    expect(store.recover()).toEqual({ recovered: 2, queuedEvents: false });
    expect(count(db, "SELECT count(*) AS n FROM audit_log WHERE account_id = ?", otherId)).toBe(2);
    expect(count(db, followUpTasks, otherId)).toBe(0);
  });
});

describe("decision store on a locked database", () => {
  it("fails the batch or its follow-ups after one wait, without a second attempt write by write", () => {
    const dataDir = tempDir();
    openDatabase(dataDir).close();
    // The store's connection logs every statement it runs: each BEGIN IMMEDIATE is one attempt at the write lock,
    // and one wait for it of the busy timeout when another connection holds it.
    const statements: string[] = [];
    const db = new Database(path.join(dataDir, DATABASE_FILE), { verbose: (sql) => statements.push(String(sql)) });
    db.pragma("foreign_keys = ON");
    db.pragma("busy_timeout = 50");
    const lockAttempts = () => statements.splice(0).filter((sql) => sql.startsWith("BEGIN IMMEDIATE")).length;
    const other = openDatabase(dataDir);
    try {
      const accountId = new AccountRepository(db).create("Acme", {}, Date.now()).id;
      const store = new DecisionStore(db, AuditSigner.loadOrCreate(dataDir));
      const now = Date.UTC(2026, 10, 21, 17);
      expect(store.write([prepareWrite(aWrite(accountId, now), [], [])]).results).toEqual([{ kind: "stored" }]);
      // Another connection holds the write lock past the busy timeout.
      other.exec("BEGIN IMMEDIATE");
      lockAttempts();
      const locked = store.write([prepareWrite(aWrite(accountId, now + 1), [], []), prepareWrite(aWrite(accountId, now + 2), [], [])]);
      expect(lockAttempts()).toBe(1);
      expect(locked.retriedAfter).toBeUndefined();
      expect(locked.results).toEqual([
        { kind: "failed", message: "database is locked" },
        { kind: "failed", message: "database is locked" },
      ]);
      const followUps = store.followUp();
      expect(lockAttempts()).toBe(1);
      expect(followUps).toEqual({ failed: 1, queuedEvents: false, error: "database is locked" });
      other.exec("ROLLBACK");
      // The stored decision's follow-up task stayed, and is carried out once the lock is gone.
      expect(store.recover()).toEqual({ recovered: 1, queuedEvents: false });
      expect(count(db, "SELECT count(*) AS n FROM decisions WHERE account_id = ?", accountId)).toBe(1);
    } finally {
      other.close();
      db.close();
    }
  });
});

describe("decision store recovering an earlier writer's follow-ups", () => {
  it("carries out the follow-ups a writer committed but did not live to carry out, once", () => {
    const dataDir = tempDir();
    const db = openDatabase(dataDir);
    try {
      const accountId = new AccountRepository(db).create("Acme", {}, Date.now()).id;
      const signer = AuditSigner.loadOrCreate(dataDir);
      const now = Date.UTC(2026, 10, 21, 15);
      const risky = aWrite(accountId, now);
      risky.openCase = { id: newId("case"), decisionId: risky.decision.id, userId: "u", priority: "critical", score: 95, decision: "deny", reasons: ["TOR_EXIT"] };
      const caseEvents = [{ kind: "event", accountId, environment: "live" as const, lane: "", payload: '{"type":"case.created"}', at: now, now }];
      // The first writer stores the batch and dies before its follow-ups.
      const batch = [prepareWrite(risky, [], caseEvents), prepareWrite(aWrite(accountId, now + 1), [], [])];
      expect(new DecisionStore(db, signer).write(batch).results.map((r) => r.kind)).toEqual(["stored", "stored"]);
      expect(count(db, "SELECT count(*) AS n FROM audit_log WHERE account_id = ?", accountId)).toBe(0);

      const next = new DecisionStore(db, signer);
      expect(next.recover()).toEqual({ recovered: 2, queuedEvents: true });
      expect(count(db, "SELECT count(*) AS n FROM audit_log WHERE action = 'decision.made' AND account_id = ?", accountId)).toBe(2);
      expect(count(db, "SELECT count(*) AS n FROM cases WHERE decision_id = ?", risky.decision.id)).toBe(1);
      expect(db.prepare("SELECT kind, payload FROM outbox WHERE account_id = ?").all(accountId)).toEqual([{ kind: "event", payload: '{"type":"case.created"}' }]);
      // Nothing left to do the second time.
      expect(new DecisionStore(db, signer).recover()).toEqual({ recovered: 0, queuedEvents: false });
    } finally {
      db.close();
    }
  });
});

describe("decision writer (its own thread)", () => {
  const dataDir = tempDir();
  let db: Db;
  let accountId: string;
  let outbox: Outbox;
  let writer: DecisionWriter;
  const clock = new ManualClock(Date.UTC(2026, 10, 21, 14));

  beforeAll(async () => {
    db = openDatabase(dataDir);
    accountId = new AccountRepository(db).create("Acme", {}, Date.now()).id;
    outbox = new Outbox(db, clock, silent);
    writer = new DecisionWriter(dataDir, outbox, silent);
    await writer.whenReady();
  });
  afterAll(async () => {
    await writer.close();
    db.close();
  });

  it("commits every decision handed over before resolving, with the outbox tasks its effects queued", async () => {
    writer.addEffect((write) => outbox.enqueue("event", write.tenant, { decisionId: write.decision.id }));
    // More than one batch's worth (256) at once: they go in several batches, two at a time.
    const writes = Array.from({ length: 600 }, (_, i) => aWrite(accountId, clock.now() + i));
    const replies = await Promise.all(writes.map((write) => writer.record(write)));
    expect(replies.every((reply) => reply === undefined)).toBe(true);
    await writer.settled();
    // Committed by the writer's connection, visible here at once.
    expect(count(db, "SELECT count(*) AS n FROM decisions WHERE account_id = ?", accountId)).toBe(600);
    const queued = db.prepare("SELECT payload FROM outbox WHERE kind = 'event' AND account_id = ?").all(accountId) as Array<{ payload: string }>;
    expect(queued.map((row) => (JSON.parse(row.payload) as { decisionId: string }).decisionId).sort()).toEqual(writes.map((w) => w.decision.id).sort());
  });

  it("rejects a write it could not store, and the others of its batch still commit", async () => {
    const good = aWrite(accountId, clock.now());
    // The same decision id again: its primary key refuses it.
    const bad = aWrite(accountId, clock.now(), { decision: { ...good.decision, evidenceId: newId("evi") } });
    const [stored, refused] = await Promise.allSettled([writer.record(good), writer.record(bad)]);
    expect(stored.status).toBe("fulfilled");
    expect(refused).toMatchObject({ status: "rejected", reason: { message: expect.stringMatching(/could not store the decision: UNIQUE/) } });
    expect(count(db, "SELECT count(*) AS n FROM decisions WHERE id = ?", good.decision.id)).toBe(1);
  });
});

describe("decision writer whose thread dies", () => {
  it("fails the calls it was writing, starts a new thread and stores the next ones", async () => {
    const dataDir = tempDir();
    const db = openDatabase(dataDir);
    const accountId = new AccountRepository(db).create("Acme", {}, Date.now()).id;
    const lines: string[] = [];
    const logger = createLogger((line) => lines.push(line));
    // The first thread exits when it receives its second batch, before writing it.
    const writer = new DecisionWriter(dataDir, new Outbox(db, new ManualClock(Date.now()), logger), logger, { crashOnBatch: 2 });
    try {
      await writer.whenReady();
      const first = aWrite(accountId, Date.now());
      await expect(writer.record(first)).resolves.toBeUndefined();
      const lost = aWrite(accountId, Date.now());
      await expect(writer.record(lost)).rejects.toThrow(/the decision writer stopped \(exit code 70\)/);
      const next = aWrite(accountId, Date.now());
      await expect(writer.record(next)).resolves.toBeUndefined();
      const stored = db.prepare("SELECT id FROM decisions WHERE account_id = ? ORDER BY id").all(accountId) as Array<{ id: string }>;
      expect(stored.map((row) => row.id)).toEqual([first.decision.id, next.decision.id]);
      expect(lines.some((line) => line.includes("the decision writer stopped; starting a new one"))).toBe(true);
    } finally {
      await writer.close();
      db.close();
    }
  });
});

describe("decision writer that cannot start", () => {
  it("fails decides with a clear error instead of starting thread after thread", async () => {
    // A file where the data directory should be: the thread cannot open the store.
    const notADirectory = path.join(tempDir(), "file");
    fs.writeFileSync(notADirectory, "");
    const db = openDatabase(tempDir());
    const lines: string[] = [];
    const logger = createLogger((line) => lines.push(line));
    const writer = new DecisionWriter(notADirectory, new Outbox(db, new ManualClock(Date.now()), logger), logger);
    try {
      await expect(writer.whenReady()).rejects.toThrow();
      // The thread's exit is reported after its error.
      await expect.poll(() => lines.some((line) => line.includes("could not start"))).toBe(true);
      await expect(writer.record(aWrite("acc_1", Date.now()))).rejects.toThrow(/the decision writer could not start/);
      expect(lines.filter((line) => line.includes("could not start"))).toHaveLength(1);
      expect(lines.some((line) => line.includes("starting a new one"))).toBe(false);
    } finally {
      await writer.close();
      db.close();
    }
  });
});
