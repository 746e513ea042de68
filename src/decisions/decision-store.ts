import type { AuditActor } from "../audit/entry.js";
import { decisionAuditFields } from "../audit/decisions.js";
import { AuditLog } from "../audit/log.js";
import type { AuditSigner } from "../audit/signer.js";
import { caseCreatedAuditFields, type NewCase } from "../cases/case-service.js";
import { entityKeys } from "../graph/entities.js";
import { OutboxInserter, type OutboxEntry } from "../outbox/outbox.js";
import { SqliteAuditStore } from "../store/audit.js";
import { CaseRepository } from "../store/cases.js";
import type { Db } from "../store/database.js";
import { DecisionRepository, type StoredDecision } from "../store/decisions.js";
import { GraphRepository } from "../store/graph.js";
import { HistoryRepository, type HistoryUpdate } from "../store/history.js";
import { IdempotencyRepository, type IdempotentResponse } from "../store/idempotency.js";
import type { Tenant } from "../store/tenant.js";
import type { DecisionDetails } from "./record.js";

/** Everything a decide stores, as sent to the decision writer (structured-cloned: plain data only). */
export interface StoredDecisionWrite {
  tenant: Tenant;
  /** The API key that asked for the decision (its id, never the key). */
  actor: AuditActor;
  decision: StoredDecision<DecisionDetails>;
  evidence: Record<string, unknown>;
  history: HistoryUpdate;
  idempotency?: { key: string; entry: IdempotentResponse };
  /** The case the decision opens (score at or above 80, or a review rule), stored with it. */
  openCase?: NewCase;
  /** The side effects' outbox tasks (events), collected on the request thread. */
  outbox: OutboxEntry[];
  /** The request thread's clock at the decision: every stored time comes from it. */
  now: number;
}

/** What became of one write. */
export type WriteResult =
  | { kind: "stored" }
  /** A concurrent retry with the same Idempotency-Key committed first: nothing was stored; answer with its response. */
  | { kind: "replayed"; response: IdempotentResponse }
  | { kind: "failed"; message: string };

/**
 * A decide's state, written atomically: the decision, its evidence, the
 * history counters, the graph edges, the signed audit entry, the idempotency
 * claim, the case it opens and the side effects' outbox tasks — all of a
 * decision or none of it.
 *
 * A batch of writes shares one SQLite transaction (group commit); a failing
 * write rolls back alone. It runs in the decision writer's thread
 * (writer-worker.ts), on that thread's connection.
 */
export class DecisionStore {
  private readonly writeAll;
  private readonly writeEach;

  constructor(db: Db, signer: AuditSigner) {
    const decisions = new DecisionRepository<DecisionDetails>(db);
    const history = new HistoryRepository(db);
    const idempotency = new IdempotencyRepository(db);
    const graph = new GraphRepository(db);
    const outbox = new OutboxInserter(db);
    const cases = new CaseRepository(db);
    // Audit entries are stamped with the time of the decision they record, from the request thread's clock.
    let writeTime = 0;
    const audit = new AuditLog(new SqliteAuditStore(db), signer, { now: () => writeTime });

    const store = (write: StoredDecisionWrite): WriteResult => {
      const { tenant, now } = write;
      if (write.idempotency && !idempotency.claim(tenant, write.idempotency.key, write.idempotency.entry, now)) {
        const earlier = idempotency.find(tenant, write.idempotency.key, now);
        if (earlier) return { kind: "replayed", response: earlier };
        throw new Error("the Idempotency-Key was claimed but its answer is gone");
      }
      writeTime = now;
      decisions.insert(tenant, write.decision, write.evidence);
      history.record(tenant, write.history, now);
      graph.recordEdges(tenant, write.decision.id, entityKeys(write.history), now);
      audit.record(decisionAuditFields(write));
      if (write.openCase) {
        cases.open(tenant, write.openCase, now);
        audit.record(caseCreatedAuditFields(tenant, write.openCase));
      }
      for (const entry of write.outbox) outbox.insert(entry);
      return { kind: "stored" };
    };
    // Writes nearly always succeed: the whole batch goes first without a savepoint per write (two statements
    // each). When one fails, that transaction rolls back and the batch is written again write by write,
    // each in a savepoint of its own, so that the failing one rolls back alone.
    this.writeAll = db.transaction((batch: readonly StoredDecisionWrite[]): WriteResult[] => batch.map(store));
    const storeInSavepoint = db.transaction(store);
    this.writeEach = db.transaction((batch: readonly StoredDecisionWrite[]): WriteResult[] =>
      batch.map((write) => {
        try {
          return storeInSavepoint(write);
        } catch (error) {
          return { kind: "failed", message: error instanceof Error ? error.message : String(error) };
        }
      }),
    );
  }

  /** Stores a batch in one transaction; when the commit itself fails, none of it is stored. */
  write(batch: readonly StoredDecisionWrite[]): WriteResult[] {
    try {
      return this.writeAll.immediate(batch);
    } catch {
      // One of the writes failed (or the commit): find out which, storing the others.
    }
    try {
      return this.writeEach.immediate(batch);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return batch.map(() => ({ kind: "failed", message }));
    }
  }
}
