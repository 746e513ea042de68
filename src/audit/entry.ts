import { createHash } from "node:crypto";
import type { Environment } from "../auth/keys.js";
import type { Clock } from "../clock.js";
import { newId } from "../ids.js";
import { canonicalJson } from "../canonical-json.js";
import type { JsonValue } from "../canonical-json.js";

/** What signs an entry: the installation's key (AuditSigner), or whatever loads it when first needed. */
export interface EntrySigner {
  /** Ed25519 signature of a hex SHA-256 entry hash, hex. */
  sign(hashHex: string): string;
}

/** What an entry records. Decisions plus every administrative change (docs/audit-log.md). */
export type AuditAction =
  | "decision.made"
  | "account.created"
  | "key.created"
  | "key.rotated"
  | "key.revoked"
  | "policy.created"
  | "policy.updated"
  | "policy.deleted"
  | "list.updated"
  | "list.deleted"
  | "list.entries_added"
  | "list.entries_removed"
  | "webhook.created"
  | "webhook.updated"
  | "webhook.deleted"
  | "webhook.disabled"
  | "case.created"
  | "case.updated"
  | "feedback.received"
  | "evidence.tampered"
  | "consortium.updated";

/**
 * Who caused the change: an API key by its id (never the key itself), the
 * fraudctl command line (optionally with the operating-system user), or the
 * service on its own (automatic case creation, an endpoint disabled by a 410).
 */
export type AuditActor = `key_${string}` | "cli" | `cli:${string}` | "system";

/** What the caller supplies; the log adds sequence, id, time and the chain fields. */
export interface AuditFields {
  /** Account the change belongs to; undefined for installation-wide changes. */
  accountId?: string | undefined;
  /** Environment within the account; undefined for installation-wide or account-wide changes. */
  environment?: Environment | undefined;
  actor: AuditActor;
  action: AuditAction;
  /** Identifier of the thing changed (key_..., pol_..., dec_...), when there is one. */
  subject?: string | undefined;
  /** Details of the change. Never secrets: key material and webhook secrets stay out. */
  data: JsonValue;
  /** When it happened, if not now: a decision's entry is written just after the decision is answered. */
  at?: number | undefined;
}

/**
 * The signed content of an entry, as serialised into its body. A type alias,
 * not an interface, so it is assignable to a JSON object.
 */
export type AuditBody = {
  /** Body format version, so a later format can be told apart. */
  v: 1;
  seq: number;
  id: string;
  /** Milliseconds since the Unix epoch. */
  at: number;
  accountId: string | null;
  environment: Environment | null;
  actor: string;
  action: string;
  subject: string | null;
  data: JsonValue;
};

/**
 * One entry as stored. `body` is the canonical JSON of {@link AuditBody}, kept
 * verbatim: the hash covers these exact bytes, so verification never depends
 * on serialising again (a later change of serialiser cannot break old chains).
 * The other content fields repeat the body so storage can index them; the
 * verifier checks that they agree with it.
 */
export interface AuditRecord {
  seq: number;
  id: string;
  at: number;
  accountId: string | null;
  environment: Environment | null;
  actor: string;
  action: string;
  subject: string | null;
  body: string;
  /** Hash of the previous entry, hex; {@link GENESIS_HASH} for the first. */
  prevHash: string;
  /** SHA-256 over prevHash followed by body (UTF-8), hex. */
  hash: string;
  /** Ed25519 signature of the 32 hash bytes, hex. */
  signature: string;
}

/** Column names for a SQLite table (docs/audit-log.md has the suggested DDL). */
export interface AuditRow {
  seq: number;
  id: string;
  at: number;
  account_id: string | null;
  environment: Environment | null;
  actor: string;
  action: string;
  subject: string | null;
  body: string;
  prev_hash: string;
  hash: string;
  signature: string;
}

/** What the first entry chains to. */
export const GENESIS_HASH = "0".repeat(64);

/** SHA-256 of the previous hash followed by the body, hex. */
export function entryHash(prevHash: string, body: string): string {
  return createHash("sha256").update(prevHash, "utf8").update(body, "utf8").digest("hex");
}

/**
 * Builds the entry that follows `prev` (undefined for the first entry). The
 * caller stores it; appends must be serialised (one writer at a time, e.g. in
 * an IMMEDIATE transaction that reads the last entry) or two entries would
 * claim the same predecessor.
 */
export function appendEntry(
  prev: AuditRecord | undefined,
  fields: AuditFields,
  signer: EntrySigner,
  clock: Clock,
): AuditRecord {
  const body: AuditBody = {
    v: 1,
    seq: prev === undefined ? 1 : prev.seq + 1,
    id: newId("aud"),
    at: fields.at ?? clock.now(),
    accountId: fields.accountId ?? null,
    environment: fields.environment ?? null,
    actor: fields.actor,
    action: fields.action,
    subject: fields.subject ?? null,
    data: fields.data,
  };
  const text = canonicalJson(body);
  const prevHash = prev === undefined ? GENESIS_HASH : prev.hash;
  const hash = entryHash(prevHash, text);
  return {
    seq: body.seq,
    id: body.id,
    at: body.at,
    accountId: body.accountId,
    environment: body.environment,
    actor: body.actor,
    action: body.action,
    subject: body.subject,
    body: text,
    prevHash,
    hash,
    signature: signer.sign(hash),
  };
}

export function toAuditRow(record: AuditRecord): AuditRow {
  return {
    seq: record.seq,
    id: record.id,
    at: record.at,
    account_id: record.accountId,
    environment: record.environment,
    actor: record.actor,
    action: record.action,
    subject: record.subject,
    body: record.body,
    prev_hash: record.prevHash,
    hash: record.hash,
    signature: record.signature,
  };
}

export function fromAuditRow(row: AuditRow): AuditRecord {
  return {
    seq: row.seq,
    id: row.id,
    at: row.at,
    accountId: row.account_id,
    environment: row.environment,
    actor: row.actor,
    action: row.action,
    subject: row.subject,
    body: row.body,
    prevHash: row.prev_hash,
    hash: row.hash,
    signature: row.signature,
  };
}
