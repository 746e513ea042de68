import { beforeEach, describe, expect, it } from "vitest";
import { appendEntry, entryHash, GENESIS_HASH } from "../../src/audit/entry.js";
import type { AuditRecord } from "../../src/audit/entry.js";
import { MemoryAuditStore } from "../../src/audit/log.js";
import { verifyChain } from "../../src/audit/verify.js";
import { ManualClock } from "../helpers/clock.js";
import { ephemeralSigner, fillLog, rehashed } from "./fixtures.js";

const signer = ephemeralSigner();
const forger = ephemeralSigner();
let store: MemoryAuditStore;
let rows: AuditRecord[];

function at(seq: number): AuditRecord {
  const record = rows.find((row) => row.seq === seq);
  if (record === undefined) throw new Error(`no entry ${seq}`);
  return record;
}

function problemOf(entries: Iterable<AuditRecord> = rows, options = {}) {
  const result = verifyChain(entries, signer.publicKey, options);
  expect(result.ok).toBe(false);
  return result;
}

beforeEach(() => {
  store = new MemoryAuditStore();
  fillLog(store, signer, 8);
  rows = store.records;
});

describe("appendEntry", () => {
  it("chains, numbers and signs entries with canonical bodies", () => {
    const first = at(1);
    expect(first.prevHash).toBe(GENESIS_HASH);
    expect(first.id).toMatch(/^aud_[0-9A-Za-z]{22}$/);
    expect(first.body).toBe(
      `{"accountId":"acct_1","action":"decision.made","actor":"key_abc","at":${first.at},"data":{"amount":12.5,"decision":"deny","reasons":["TOR_EXIT"],"score":71},"environment":"live","id":"${first.id}","seq":1,"subject":"dec_1","v":1}`,
    );
    expect(first.hash).toBe(entryHash(GENESIS_HASH, first.body));
    for (let seq = 2; seq <= 8; seq++) {
      expect(at(seq).prevHash).toBe(at(seq - 1).hash);
      expect(at(seq).at - at(seq - 1).at).toBe(1000);
    }
    const wide = at(3);
    expect([wide.accountId, wide.environment, wide.actor, wide.action, wide.subject]).toEqual([
      null,
      null,
      "cli",
      "key.rotated",
      "key_3",
    ]);
  });
});

describe("verifyChain on an intact log", () => {
  it("accepts every entry and reports the head", () => {
    expect(verifyChain(rows, signer.publicKey)).toEqual({ ok: true, checked: 8, head: { seq: 8, hash: at(8).hash } });
  });

  it("accepts an empty log, and a log that grew past a recorded head", () => {
    expect(verifyChain([], signer.publicKey)).toEqual({ ok: true, checked: 0, head: undefined });
    const head = { seq: 5, hash: at(5).hash };
    expect(verifyChain(rows, signer.publicKey, { expectedHead: head }).ok).toBe(true);
  });

  it("keeps verifying entries appended after a verification", () => {
    const appended = appendEntry(at(8), { actor: "cli", action: "policy.updated", data: { name: "x" } }, signer, new ManualClock());
    expect(verifyChain([...rows, appended], signer.publicKey).checked).toBe(9);
  });
});

describe("verifyChain names the first tampered entry", () => {
  it("altered: data edited in place", () => {
    rows[3] = { ...at(4), body: at(4).body.replace('"score":74', '"score":4') };
    expect(problemOf().firstProblem).toMatchObject({ seq: 4, id: at(4).id, kind: "altered" });
    expect(problemOf().checked).toBe(3);
  });

  it("altered: an indexed column changed while the body was left alone", () => {
    rows[4] = { ...at(5), action: "case.updated" };
    expect(problemOf().firstProblem).toMatchObject({ seq: 5, kind: "altered" });
    expect(problemOf().firstProblem?.message).toMatch(/action column/);
  });

  it("altered: the seq column renumbered", () => {
    rows[4] = { ...at(5), seq: 50 };
    expect(problemOf().firstProblem).toMatchObject({ seq: 5, kind: "altered" });
  });

  it("altered: content rewritten with a recomputed hash", () => {
    rows[3] = rehashed(at(4), at(4).body.replace('"decision":"deny"', '"decision":"allow"'));
    expect(problemOf().firstProblem).toMatchObject({ seq: 4, id: at(4).id, kind: "altered" });
    expect(problemOf().firstProblem?.message).toMatch(/rewritten along with its hash/);
  });

  it("bad-signature: the last entry rewritten with a recomputed hash cannot be told from a forged append", () => {
    rows[7] = rehashed(at(8), at(8).body.replace('"data":{}', '"data":{"note":"forged"}'));
    expect(problemOf().firstProblem).toMatchObject({ seq: 8, kind: "bad-signature" });
  });

  it("bad-signature: a signature swapped for another valid one", () => {
    rows[5] = { ...at(6), signature: at(5).signature };
    expect(problemOf().firstProblem).toMatchObject({ seq: 6, id: at(6).id, kind: "bad-signature" });
  });

  it("bad-signature: the wrong public key fails at the first entry", () => {
    const result = verifyChain(rows, forger.publicKey);
    expect(result).toMatchObject({ ok: false, checked: 0, head: undefined, firstProblem: { seq: 1, kind: "bad-signature" } });
  });

  it("deleted: one entry in the middle", () => {
    const next = at(5);
    rows.splice(3, 1);
    expect(problemOf().firstProblem).toMatchObject({ seq: 4, id: next.id, kind: "deleted" });
    expect(problemOf().firstProblem?.message).toMatch(/^seq 4 after entry aud_\w+ \(seq 3\) is missing/);
  });

  it("deleted: a run of entries, and the first entry", () => {
    rows.splice(3, 2);
    expect(problemOf().firstProblem?.message).toMatch(/^seqs 4 to 5 after/);
    rows.splice(0, 1);
    expect(problemOf().firstProblem).toMatchObject({ seq: 1, id: at(2).id, kind: "deleted" });
  });

  it("deleted: a truncated tail, detected only against a recorded head", () => {
    const head = { seq: 8, hash: at(8).hash };
    rows.splice(6, 2);
    expect(verifyChain(rows, signer.publicKey).ok).toBe(true);
    expect(problemOf(rows, { expectedHead: head }).firstProblem).toMatchObject({ seq: 7, id: null, kind: "deleted" });
  });

  it("altered: the entry at a recorded head is not the one recorded", () => {
    expect(problemOf(rows, { expectedHead: { seq: 5, hash: at(4).hash } }).firstProblem).toMatchObject({
      seq: 5,
      kind: "altered",
    });
  });

  it("inserted: a forged entry that chains correctly but is signed with another key", () => {
    const forged = appendEntry(at(3), { actor: "cli", action: "key.revoked", data: {} }, forger, new ManualClock());
    rows.splice(3, 0, forged);
    expect(problemOf().firstProblem).toMatchObject({ seq: 4, id: forged.id, kind: "inserted" });
  });

  it("inserted: a row whose hash does not even match, skipped over by the chain", () => {
    rows.splice(3, 0, { ...at(2), id: "aud_garbage", hash: "f".repeat(64) });
    expect(problemOf().firstProblem).toMatchObject({ seq: 4, id: "aud_garbage", kind: "inserted" });
  });

  it("inserted: a genuine earlier entry copied again (a replay)", () => {
    rows.splice(6, 0, at(2));
    expect(problemOf().firstProblem).toMatchObject({ seq: 7, id: at(2).id, kind: "inserted" });
    expect(problemOf().firstProblem?.message).toMatch(/signed as seq 2, appears again/);
  });

  it("inserted: a genuine entry copied to the end", () => {
    rows.push(at(3));
    expect(problemOf().firstProblem).toMatchObject({ seq: 9, kind: "inserted" });
  });

  it("inserted: entries from another copy of the same log (a restored backup that went on)", () => {
    const clock = new ManualClock();
    const forkSeventh = appendEntry(at(6), { actor: "cli", action: "list.updated", data: {} }, signer, clock);
    const forkEighth = appendEntry(forkSeventh, { actor: "cli", action: "list.updated", data: {} }, signer, clock);
    expect(problemOf([...rows.slice(0, 7), forkEighth]).firstProblem).toMatchObject({
      seq: 8,
      id: forkEighth.id,
      kind: "inserted",
    });
    expect(problemOf([...rows.slice(0, 7), forkEighth]).firstProblem?.message).toMatch(/different copy of the log/);
    expect(problemOf([...rows, forkEighth]).firstProblem).toMatchObject({ seq: 9, id: forkEighth.id, kind: "inserted" });
  });

  it("reordered: two neighbours swapped", () => {
    const [fourth, fifth] = [at(4), at(5)];
    rows[3] = fifth;
    rows[4] = fourth;
    expect(problemOf().firstProblem).toMatchObject({ seq: 4, id: fifth.id, kind: "reordered" });
    expect(problemOf().firstProblem?.message).toContain(`entry ${fourth.id} (seq 4) was moved further on`);
  });

  it("reordered: an entry moved to the end", () => {
    const third = at(3);
    rows.splice(2, 1);
    rows.push(third);
    expect(problemOf().firstProblem).toMatchObject({ seq: 3, id: at(4).id, kind: "reordered" });
  });

  it("reordered: an entry moved earlier", () => {
    const seventh = at(7);
    rows.splice(6, 1);
    rows.splice(2, 0, seventh);
    expect(problemOf().firstProblem).toMatchObject({ seq: 3, id: seventh.id, kind: "reordered" });
  });
});
