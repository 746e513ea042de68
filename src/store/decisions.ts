import { canonicalJson, sha256Hex } from "../canonical-json.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/** A persisted decide: the indexed columns plus the full record as JSON. */
export interface StoredDecision<Details> {
  id: string;
  evidenceId: string;
  requestId: string;
  userId: string;
  action: string;
  createdAt: number;
  decision: string;
  score: number;
  confidence: number;
  details: Details;
}

interface DecisionRow {
  id: string;
  evidence_id: string;
  request_id: string;
  user_id: string;
  action: string;
  created_at: number;
  decision: string;
  score: number;
  confidence: number;
  record: string;
}

/**
 * A decision ready for its row: the record already JSON, the evidence already
 * canonical and hashed. The request thread prepares it ({@link decisionRow}),
 * so that the decision writer, whose thread is what bounds decide's
 * throughput, only stores strings (docs/benchmarks.md).
 */
export interface DecisionRowWrite extends Omit<StoredDecision<never>, "details"> {
  record: string;
  evidence: { content: string; integrityHash: string };
}

/** A decision and its evidence as stored: the evidence content is canonical JSON, its SHA-256 the integrity hash. */
export function decisionRow<Details>(decision: StoredDecision<Details>, evidence: Record<string, unknown>): DecisionRowWrite {
  const { details, ...columns } = decision;
  const content = canonicalJson(evidence);
  return { ...columns, record: JSON.stringify(details), evidence: { content, integrityHash: sha256Hex(content) } };
}

export interface EvidenceRecord {
  id: string;
  decisionId: string;
  content: string;
  integrityHash: string;
}

/**
 * Decisions and their evidence. Every query is scoped by account and
 * environment: an id of another tenant reads as not found.
 */
export class DecisionRepository<Details> {
  private readonly insertDecisionStmt;
  private readonly insertEvidenceStmt;
  private readonly byIdStmt;
  private readonly byEvidenceStmt;
  private readonly latestForUserStmt;
  private readonly evidenceStmt;
  private readonly updateRecordStmt;

  constructor(db: Db) {
    this.insertDecisionStmt = db.prepare(
      `INSERT INTO decisions (id, account_id, environment, evidence_id, request_id, user_id, action, created_at, decision, score, confidence, record)
       VALUES (@id, @accountId, @environment, @evidenceId, @requestId, @userId, @action, @createdAt, @decision, @score, @confidence, @record)`,
    );
    this.insertEvidenceStmt = db.prepare(
      "INSERT INTO evidence (id, decision_id, account_id, environment, content, integrity_hash) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.byIdStmt = db.prepare<[string, string, string], DecisionRow>(
      "SELECT * FROM decisions WHERE id = ? AND account_id = ? AND environment = ?",
    );
    this.byEvidenceStmt = db.prepare<[string, string, string], DecisionRow>(
      "SELECT * FROM decisions WHERE evidence_id = ? AND account_id = ? AND environment = ?",
    );
    this.latestForUserStmt = db.prepare<[string, string, string], DecisionRow>(
      "SELECT * FROM decisions WHERE account_id = ? AND environment = ? AND user_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
    );
    this.evidenceStmt = db.prepare<[string, string, string], { id: string; decision_id: string; content: string; integrity_hash: string }>(
      "SELECT id, decision_id, content, integrity_hash FROM evidence WHERE id = ? AND account_id = ? AND environment = ?",
    );
    this.updateRecordStmt = db.prepare<[string, string, string, string]>(
      "UPDATE decisions SET record = ? WHERE id = ? AND account_id = ? AND environment = ?",
    );
  }

  /** Stores a decision and its evidence (call inside the decide transaction). */
  insert(tenant: Tenant, decision: DecisionRowWrite): void {
    this.insertDecisionStmt.run({
      id: decision.id,
      accountId: tenant.accountId,
      environment: tenant.environment,
      evidenceId: decision.evidenceId,
      requestId: decision.requestId,
      userId: decision.userId,
      action: decision.action,
      createdAt: decision.createdAt,
      decision: decision.decision,
      score: decision.score,
      confidence: decision.confidence,
      record: decision.record,
    });
    const { content, integrityHash } = decision.evidence;
    this.insertEvidenceStmt.run(decision.evidenceId, decision.id, tenant.accountId, tenant.environment, content, integrityHash);
  }

  get(tenant: Tenant, id: string): StoredDecision<Details> | undefined {
    return this.fromRow(this.byIdStmt.get(id, tenant.accountId, tenant.environment));
  }

  getByEvidence(tenant: Tenant, evidenceId: string): StoredDecision<Details> | undefined {
    return this.fromRow(this.byEvidenceStmt.get(evidenceId, tenant.accountId, tenant.environment));
  }

  latestForUser(tenant: Tenant, userId: string): StoredDecision<Details> | undefined {
    return this.fromRow(this.latestForUserStmt.get(tenant.accountId, tenant.environment, userId));
  }

  evidence(tenant: Tenant, evidenceId: string): EvidenceRecord | undefined {
    const row = this.evidenceStmt.get(evidenceId, tenant.accountId, tenant.environment);
    return row && { id: row.id, decisionId: row.decision_id, content: row.content, integrityHash: row.integrity_hash };
  }

  /** Replaces a decision's record (JSON of its details). */
  updateRecord(tenant: Tenant, id: string, record: string): void {
    this.updateRecordStmt.run(record, id, tenant.accountId, tenant.environment);
  }

  private fromRow(row: DecisionRow | undefined): StoredDecision<Details> | undefined {
    if (!row) return undefined;
    return {
      id: row.id,
      evidenceId: row.evidence_id,
      requestId: row.request_id,
      userId: row.user_id,
      action: row.action,
      createdAt: row.created_at,
      decision: row.decision,
      score: row.score,
      confidence: row.confidence,
      details: JSON.parse(row.record) as Details,
    };
  }
}
