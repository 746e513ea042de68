// The audit log on a real SQLite file, tampered with by SQL the way someone
// holding the database (but not the private key) could.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "../../src/store/sqlite-driver.cjs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { appendEntry, fromAuditRow } from "../../src/audit/entry.js";
import type { AuditRow } from "../../src/audit/entry.js";
import { AuditLog } from "../../src/audit/log.js";
import { AuditSigner, importPublicKeyPem } from "../../src/audit/signer.js";
import { verifyChain } from "../../src/audit/verify.js";
import { SqliteAuditStore } from "../../src/store/audit.js";
import { openDatabase } from "../../src/store/database.js";
import type { VerifyResult } from "../../src/audit/verify.js";
import { ManualClock } from "../helpers/clock.js";
import { ephemeralSigner, fillLog } from "./fixtures.js";


let dir: string;
let db: Database.Database;
let store: SqliteAuditStore;
let signer: AuditSigner;

function row(seq: number): AuditRow {
  const found = db.prepare<[number], AuditRow>("SELECT * FROM audit_log WHERE seq = ?").get(seq);
  if (found === undefined) throw new Error(`no row ${seq}`);
  return found;
}

/** Tampering starts by dropping the triggers, as anyone with the file can. */
/** Someone holding the file drops whatever guards stand in the way, then edits rows. */
function tamper(sql: string, ...params: unknown[]): void {
  db.exec(
    "DROP TRIGGER IF EXISTS audit_log_no_update; DROP TRIGGER IF EXISTS audit_log_no_delete; DROP INDEX IF EXISTS audit_log_one_per_decision;",
  );
  db.prepare(sql).run(...params);
}

function verify(options = {}): VerifyResult {
  // Verify from a fresh connection and the exported public key, as `fraudctl audit verify` would.
  const reader = new Database(path.join(dir, "fraud.db"), { readonly: true });
  try {
    return verifyChain(new SqliteAuditStore(reader).entries(), importPublicKeyPem(signer.exportPublicKeyPem()), options);
  } finally {
    reader.close();
  }
}

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "audit-sqlite-"));
  // The real schema: every migration, audit log table and its append-only triggers included.
  db = openDatabase(dir);
  store = new SqliteAuditStore(db);
  signer = AuditSigner.loadOrCreate(dir);
  fillLog(store, signer, 10);
});

afterEach(() => {
  db.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("audit log in SQLite", () => {
  it("round-trips rows and verifies the whole file", () => {
    expect(verify()).toEqual({ ok: true, checked: 10, head: { seq: 10, hash: row(10).hash } });
    expect(row(1).environment).toBe("live");
    expect(row(3).account_id).toBeNull();
  });

  it("appends several entries in one step, each chained to the one before, and they verify", () => {
    const log = new AuditLog(store, signer, new ManualClock());
    const fields = (subject: string) => ({ accountId: "acc_1", environment: "live" as const, actor: "system" as const, action: "case.created" as const, subject, data: {} });
    const records = db.transaction(() => log.recordAll([fields("case_a"), fields("case_b"), fields("case_c")]))();
    expect(records.map((r) => r.seq)).toEqual([11, 12, 13]);
    expect(records[0]?.prevHash).toBe(row(10).hash);
    expect(records[2]?.prevHash).toBe(records[1]?.hash);
    // Outside a transaction too (its own IMMEDIATE one); an empty list appends nothing.
    expect(log.recordAll([fields("case_d")]).map((r) => r.seq)).toEqual([14]);
    expect(log.recordAll([])).toEqual([]);
    expect(verify()).toEqual({ ok: true, checked: 14, head: { seq: 14, hash: row(14).hash } });
  });

  it("keeps ordinary code from updating or deleting entries", () => {
    expect(() => db.prepare("UPDATE audit_log SET action = 'x' WHERE seq = 1").run()).toThrow(/append-only/);
    expect(() => db.prepare("DELETE FROM audit_log WHERE seq = 1").run()).toThrow(/append-only/);
  });

  it("releases the connection when verification stops early", () => {
    tamper("UPDATE audit_log SET body = replace(body, '\"score\":71', '\"score\":1') WHERE seq = 1");
    expect(verifyChain(store.entries(), signer.publicKey).firstProblem?.kind).toBe("altered");
    // A still-open iterator would make this throw "This database connection is busy".
    store.append((last) => appendEntry(last, { actor: "cli", action: "key.created", data: {} }, signer, new ManualClock()));
    expect(row(11).action).toBe("key.created");
  });

  it("altered: a decision's data edited in the body", () => {
    tamper("UPDATE audit_log SET body = replace(body, '\"decision\":\"deny\"', '\"decision\":\"allow\"') WHERE seq = 4");
    expect(verify().firstProblem).toMatchObject({ seq: 4, id: row(4).id, kind: "altered" });
  });

  it("altered: an indexed column edited", () => {
    tamper("UPDATE audit_log SET account_id = 'acct_other' WHERE seq = 5");
    expect(verify().firstProblem).toMatchObject({ seq: 5, kind: "altered" });
  });

  it("deleted: a row removed", () => {
    tamper("DELETE FROM audit_log WHERE seq = 6");
    expect(verify().firstProblem).toMatchObject({ seq: 6, id: row(7).id, kind: "deleted" });
  });

  it("deleted: the newest rows removed, caught against the head recorded before", () => {
    const head = verify().head;
    tamper("DELETE FROM audit_log WHERE seq > 8");
    expect(verify().ok).toBe(true);
    expect(verify({ expectedHead: head }).firstProblem).toMatchObject({ seq: 9, id: null, kind: "deleted" });
  });

  it("inserted: later rows renumbered to make room for a forged one", () => {
    tamper("UPDATE audit_log SET seq = -seq WHERE seq >= 4");
    tamper("UPDATE audit_log SET seq = 1 - seq WHERE seq < 0");
    const forged = appendEntry(fromAuditRow(row(3)), { actor: "cli", action: "key.revoked", data: {} }, ephemeralSigner(), new ManualClock());
    store.append(() => forged);
    expect(row(4).id).toBe(forged.id);
    expect(verify().firstProblem).toMatchObject({ seq: 4, id: forged.id, kind: "inserted" });
  });

  it("inserted: a genuine row replayed in the middle (its id column changed, since ids are unique)", () => {
    tamper("UPDATE audit_log SET seq = -seq WHERE seq >= 7");
    tamper("UPDATE audit_log SET seq = 1 - seq WHERE seq < 0");
    db.prepare(
      `INSERT INTO audit_log VALUES (@seq, @id, @at, @account_id, @environment, @actor, @action, @subject, @body, @prev_hash, @hash, @signature)`,
    ).run({ ...row(1), seq: 7, id: "aud_replayed" });
    expect(verify().firstProblem).toMatchObject({ seq: 7, id: "aud_replayed", kind: "inserted" });
  });

  it("altered: a genuine row copied onto the end cannot hide behind its valid signature", () => {
    db.prepare(
      `INSERT INTO audit_log VALUES (@seq, @id, @at, @account_id, @environment, @actor, @action, @subject, @body, @prev_hash, @hash, @signature)`,
    ).run({ ...row(2), seq: 11, id: "aud_copy" });
    expect(verify().firstProblem).toMatchObject({ seq: 11, id: "aud_copy", kind: "altered" });
    expect(verify().firstProblem?.message).toMatch(/id column disagrees/);
  });

  it("reordered: two rows' seq values swapped", () => {
    const [fifth, sixth] = [row(5), row(6)];
    tamper("UPDATE audit_log SET seq = -1 WHERE seq = 5");
    tamper("UPDATE audit_log SET seq = 5 WHERE seq = 6");
    tamper("UPDATE audit_log SET seq = 6 WHERE seq = -1");
    expect(verify().firstProblem).toMatchObject({ seq: 5, id: sixth.id, kind: "reordered" });
    expect(verify().firstProblem?.message).toContain(`entry ${fifth.id} (seq 5) was moved further on`);
  });

  it("reordered: a row moved to the end", () => {
    const third = row(3);
    tamper("UPDATE audit_log SET seq = 99 WHERE seq = 3");
    expect(verify().firstProblem).toMatchObject({ seq: 3, id: row(4).id, kind: "reordered" });
    expect(verify().firstProblem?.message).toContain(third.id);
  });
});
