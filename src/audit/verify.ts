import type { KeyObject } from "node:crypto";
import { entryHash, GENESIS_HASH } from "./entry.js";
import type { AuditBody, AuditRecord } from "./entry.js";
import type { JsonValue } from "../canonical-json.js";
import { publicKeyFingerprint, verifyHashSignature } from "./signer.js";

export type ChainProblemKind = "altered" | "deleted" | "inserted" | "reordered" | "bad-signature";

export interface ChainProblem {
  /**
   * Chain position at which verification stopped: every entry before it is
   * intact. For "deleted" it is the first missing sequence number.
   */
  seq: number;
  /** Id column of the row found at that position; null when there is none (a truncated tail). */
  id: string | null;
  kind: ChainProblemKind;
  message: string;
}

export interface VerifyResult {
  ok: boolean;
  /** Entries verified intact, in order, before the first problem (all of them when ok). */
  checked: number;
  /** Sequence number and hash of the last intact entry; record it to detect later truncation. */
  head: { seq: number; hash: string } | undefined;
  firstProblem?: ChainProblem;
}

export interface VerifyOptions {
  /**
   * A head recorded earlier (printed by a previous verify, or kept outside the
   * database). A chain cannot show that its own tail was cut off; with an
   * anchor, a log that now ends before it is reported as "deleted".
   */
  expectedHead?: { seq: number; hash: string } | undefined;
}

/**
 * Checks a whole log, in storage order, and names the first problem. The rules
 * (also in docs/audit-log.md):
 *
 * A row is authentic when SHA-256(prevHash + body) equals its hash, the
 * signature verifies over that hash, the body parses as an entry and the
 * indexed columns agree with the body. The seq column is excluded on purpose:
 * the signed seq lives in the body, and the column is where storage put the
 * row, which is what reordering changes.
 *
 * Walking the rows with `prev` the last intact entry and `e` = prev.seq + 1:
 * - an authentic row that chains to prev with signed seq e is intact; if its
 *   seq column differs, the column was altered;
 * - a row that is not authentic is "inserted" when the next row is authentic
 *   and chains to prev (the chain runs around it); otherwise "altered" when its
 *   hash or columns disagree with its content, or when it was re-hashed (its
 *   signature fails and the next row chains to some other hash); "bad-signature"
 *   when only the signature fails and the next row chains to its hash (the
 *   signature was replaced, or the public key is not this log's), or when it is
 *   the last row and a forged append cannot be told from a rewritten last entry;
 * - an authentic row signed with a seq below e is a second copy of an earlier
 *   entry, and one signed as e that chains elsewhere comes from another copy
 *   of the log: both "inserted";
 * - an authentic row signed with a seq above e means entry e is not here:
 *   "reordered" if an authentic entry e chaining to prev appears further on,
 *   otherwise "deleted".
 *
 * Detection is certain (without the private key no change keeps every row
 * authentic and chained); the kind is the most likely explanation. Memory stays
 * constant, so a log of millions of rows can be streamed from SQLite.
 */
export function verifyChain(
  entries: Iterable<AuditRecord>,
  publicKey: KeyObject,
  options: VerifyOptions = {},
): VerifyResult {
  const rows = new Cursor(entries[Symbol.iterator]());
  try {
    return walk(rows, publicKey, options.expectedHead);
  } finally {
    // Stopping early must still release the source: a better-sqlite3
    // iterator keeps its connection busy until it is closed.
    rows.close();
  }
}

function walk(rows: Cursor, publicKey: KeyObject, anchor: VerifyOptions["expectedHead"]): VerifyResult {
  let prev: { seq: number; hash: string; id: string | null } = { seq: 0, hash: GENESIS_HASH, id: null };
  let checked = 0;
  const head = (): VerifyResult["head"] => (checked === 0 ? undefined : { seq: prev.seq, hash: prev.hash });
  const fail = (seq: number, id: string | null, kind: ChainProblemKind, message: string): VerifyResult => ({
    ok: false,
    checked,
    head: head(),
    firstProblem: { seq, id, kind, message },
  });

  for (let record = rows.next(); record !== undefined; record = rows.next()) {
    const expected = prev.seq + 1;
    const after = prev.id === null ? "at the start of the log" : `after entry ${prev.id} (seq ${prev.seq})`;
    const inspection = inspect(record, publicKey);

    if (inspection.body === undefined || inspection.problem !== undefined) {
      const following = rows.peek();
      const followingBody = following === undefined ? undefined : authenticBody(following, publicKey);
      if (following !== undefined && followingBody !== undefined && following.prevHash === prev.hash) {
        return fail(
          expected,
          record.id,
          "inserted",
          `row ${record.id} ${after} is not part of the chain: ${inspection.problem}, and the next row chains past it`,
        );
      }
      if (!inspection.signatureOnly) {
        return fail(expected, record.id, "altered", `entry ${record.id} ${after} was altered: ${inspection.problem}`);
      }
      if (following !== undefined && following.prevHash === record.hash) {
        return fail(
          expected,
          record.id,
          "bad-signature",
          `entry ${record.id} ${after} has a signature that does not verify under key ${publicKeyFingerprint(publicKey)}, though its content matches its hash and the next entry chains to it: the signature was replaced, or this is not the log's public key`,
        );
      }
      if (following !== undefined) {
        return fail(
          expected,
          record.id,
          "altered",
          `entry ${record.id} ${after} was rewritten along with its hash: its signature does not verify and the next entry chains to a different hash`,
        );
      }
      return fail(
        expected,
        record.id,
        "bad-signature",
        `the last entry ${record.id} does not carry a valid signature under key ${publicKeyFingerprint(publicKey)}: it was forged onto the end or rewritten`,
      );
    }

    const body = inspection.body;
    if (record.prevHash === prev.hash && body.seq === expected) {
      if (record.seq !== expected) {
        return fail(
          expected,
          record.id,
          "altered",
          `entry ${record.id} is signed as seq ${expected} but its seq column says ${record.seq}`,
        );
      }
      if (anchor !== undefined && anchor.seq === expected && anchor.hash !== record.hash) {
        return fail(
          expected,
          record.id,
          "altered",
          `entry ${record.id} (seq ${expected}) does not have the recorded head hash ${anchor.hash}`,
        );
      }
      prev = { seq: body.seq, hash: record.hash, id: record.id };
      checked++;
      continue;
    }
    if (body.seq < expected) {
      return fail(
        expected,
        record.id,
        "inserted",
        `entry ${record.id}, signed as seq ${body.seq}, appears again ${after}: a copy of an earlier entry, or one from another copy of the log`,
      );
    }
    if (body.seq === expected) {
      return fail(
        expected,
        record.id,
        "inserted",
        `entry ${record.id} ${after} is signed as seq ${expected} but chains to another entry: it comes from a different copy of the log`,
      );
    }
    const missing = body.seq === expected + 1 ? `seq ${expected}` : `seqs ${expected} to ${body.seq - 1}`;
    const moved = rows.findRest((candidate) => {
      if (candidate.prevHash !== prev.hash) return false;
      return authenticBody(candidate, publicKey)?.seq === expected;
    });
    if (moved !== undefined) {
      return fail(
        expected,
        record.id,
        "reordered",
        `entry ${record.id} (signed seq ${body.seq}) stands where seq ${expected} belongs ${after}; entry ${moved.id} (seq ${expected}) was moved further on`,
      );
    }
    return fail(
      expected,
      record.id,
      "deleted",
      `${missing} ${after} is missing: the next entry present is ${record.id} (seq ${body.seq})`,
    );
  }

  if (anchor !== undefined && anchor.seq > prev.seq) {
    return fail(
      prev.seq + 1,
      null,
      "deleted",
      `the log ends at seq ${prev.seq} but a head at seq ${anchor.seq} was recorded: its tail was deleted`,
    );
  }
  return { ok: true, checked, head: head() };
}

interface Inspection {
  /** The parsed body, when the body is a well-formed entry. */
  body: AuditBody | undefined;
  /** What makes the row not authentic, if anything. */
  problem: string | undefined;
  /** The content is consistent (hash, body, columns) and only the signature fails. */
  signatureOnly: boolean;
}

function inspect(record: AuditRecord, publicKey: KeyObject): Inspection {
  if (entryHash(record.prevHash, record.body) !== record.hash) {
    return { body: undefined, problem: "its content does not match its hash", signatureOnly: false };
  }
  const body = parseBody(record.body);
  if (body === undefined) {
    return { body: undefined, problem: "its body is not a well-formed entry", signatureOnly: false };
  }
  const column = disagreeingColumn(record, body);
  if (column !== undefined) {
    return { body, problem: `its ${column} column disagrees with the signed body`, signatureOnly: false };
  }
  if (!verifyHashSignature(publicKey, record.hash, record.signature)) {
    return { body, problem: "its signature does not verify", signatureOnly: true };
  }
  return { body, problem: undefined, signatureOnly: false };
}

/** The entry's body when the entry is authentic on its own: it matches its hash and columns, and its signature verifies. */
export function authenticBody(record: AuditRecord, publicKey: KeyObject): AuditBody | undefined {
  const inspection = inspect(record, publicKey);
  return inspection.problem === undefined ? inspection.body : undefined;
}

function disagreeingColumn(record: AuditRecord, body: AuditBody): string | undefined {
  if (record.id !== body.id) return "id";
  if (record.at !== body.at) return "at";
  if (record.accountId !== body.accountId) return "account";
  if (record.environment !== body.environment) return "environment";
  if (record.actor !== body.actor) return "actor";
  if (record.action !== body.action) return "action";
  if (record.subject !== body.subject) return "subject";
  return undefined;
}

function parseBody(text: string): AuditBody | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const body = value as Record<string, unknown>;
  const nullableString = (field: unknown): field is string | null => field === null || typeof field === "string";
  const valid =
    body.v === 1 &&
    Number.isSafeInteger(body.seq) &&
    typeof body.id === "string" &&
    Number.isSafeInteger(body.at) &&
    nullableString(body.accountId) &&
    (body.environment === null || body.environment === "test" || body.environment === "live") &&
    typeof body.actor === "string" &&
    typeof body.action === "string" &&
    nullableString(body.subject) &&
    "data" in body;
  if (!valid) return undefined;
  return {
    v: 1,
    seq: body.seq as number,
    id: body.id as string,
    at: body.at as number,
    accountId: body.accountId as string | null,
    environment: body.environment as AuditBody["environment"],
    actor: body.actor as string,
    action: body.action as string,
    subject: body.subject as string | null,
    data: body.data as JsonValue,
  };
}

/** An iterator with one row of look-ahead and a scan of whatever remains. */
class Cursor {
  private buffered: AuditRecord | undefined;

  constructor(private readonly iterator: Iterator<AuditRecord>) {}

  next(): AuditRecord | undefined {
    if (this.buffered !== undefined) {
      const record = this.buffered;
      this.buffered = undefined;
      return record;
    }
    const step = this.iterator.next();
    return step.done === true ? undefined : step.value;
  }

  peek(): AuditRecord | undefined {
    this.buffered ??= this.next();
    return this.buffered;
  }

  /** First remaining row that matches, consuming the rows it reads. */
  findRest(match: (record: AuditRecord) => boolean): AuditRecord | undefined {
    for (let record = this.next(); record !== undefined; record = this.next()) {
      if (match(record)) return record;
    }
    return undefined;
  }

  close(): void {
    this.iterator.return?.();
  }
}
