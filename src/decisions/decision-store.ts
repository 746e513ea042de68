import { AuditLog } from "../audit/log.js";
import type { AuditActor } from "../audit/entry.js";
import type { AuditSigner } from "../audit/signer.js";
import type { NewCase } from "../cases/case-service.js";
import { systemClock } from "../clock.js";
import { entityKeys } from "../graph/entities.js";
import { OutboxTable, type OutboxEntry } from "../outbox/outbox.js";
import { SqliteAuditStore } from "../store/audit.js";
import type { Db } from "../store/database.js";
import { DecisionRepository, type StoredDecision } from "../store/decisions.js";
import { GraphRepository } from "../store/graph.js";
import { HistoryRepository, type HistoryUpdate } from "../store/history.js";
import { IdempotencyRepository, type IdempotentResponse } from "../store/idempotency.js";
import type { Tenant } from "../store/tenant.js";
import { DECISION_FOLLOW_UP_TASK, DecisionFollowUps, followUpOf, type FollowUpPayload } from "./follow-up.js";
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
  /** The case the decision opens (score at or above 80, or a review rule), opened just after it. */
  openCase?: NewCase;
  /** The side effects' outbox tasks (events), collected on the request thread, stored with the decision. */
  outbox: OutboxEntry[];
  /** The case's case.created event, collected likewise, stored with the case. */
  caseEvents: OutboxEntry[];
  /** The request thread's clock at the decision: every stored time comes from it. */
  now: number;
}

/** What became of one write. */
export type WriteResult =
  | { kind: "stored" }
  /** A concurrent retry with the same Idempotency-Key committed first: nothing was stored; answer with its response. */
  | { kind: "replayed"; response: IdempotentResponse }
  | { kind: "failed"; message: string };

/** A stored decision's follow-up, still to be carried out (follow-up.ts). */
interface PendingFollowUp {
  tenant: Tenant;
  task: number;
  payload: FollowUpPayload;
}

/**
 * A decide's state in two transactions, both on the decision writer's thread
 * (writer-worker.ts) and its connection.
 *
 * The first, before the answer: the decision, its evidence, the history
 * counters, the graph edges, the idempotency claim, the side effects' outbox
 * tasks and the decision's follow-up task — all of a decision or none of it.
 * A batch of writes shares it (group commit); a failing write rolls back alone.
 *
 * The second, once the answers are on their way: the batch's follow-ups (the
 * signed audit entries, the cases), each removing its task. A crash in between
 * leaves the tasks, which the outbox runner carries out instead.
 */
export class DecisionStore {
  private readonly writeAll;
  private readonly writeEach;
  private readonly followUpAll;
  private readonly outbox;
  private readonly decisions;
  /** Follow-ups of the batches written since the last {@link followUp}. */
  private pending: PendingFollowUp[] = [];

  constructor(db: Db, signer: AuditSigner) {
    const decisions = new DecisionRepository<DecisionDetails>(db);
    this.decisions = decisions;
    const history = new HistoryRepository(db);
    const idempotency = new IdempotencyRepository(db);
    const graph = new GraphRepository(db);
    const outbox = new OutboxTable(db);
    this.outbox = outbox;
    const auditStore = new SqliteAuditStore(db);
    // Entries carry the decision's time (AuditFields.at); the clock only stamps what has none.
    const followUps = new DecisionFollowUps(db, auditStore, new AuditLog(auditStore, signer, systemClock), outbox);

    const store = (write: StoredDecisionWrite, followUpsOut: PendingFollowUp[]): WriteResult => {
      const { tenant, now } = write;
      if (write.idempotency && !idempotency.claim(tenant, write.idempotency.key, write.idempotency.entry, now)) {
        const earlier = idempotency.find(tenant, write.idempotency.key, now);
        if (earlier) return { kind: "replayed", response: earlier };
        throw new Error("the Idempotency-Key was claimed but its answer is gone");
      }
      decisions.insert(tenant, write.decision, write.evidence);
      history.record(tenant, write.history, now);
      graph.recordEdges(tenant, write.decision.id, entityKeys(write.history), now);
      for (const entry of write.outbox) outbox.insert(entry);
      const { payload, entry } = followUpOf(write);
      followUpsOut.push({ tenant, task: outbox.insert(entry), payload });
      return { kind: "stored" };
    };
    // Writes nearly always succeed: the whole batch goes first without a savepoint per write (two statements
    // each). When one fails, that transaction rolls back and the batch is written again write by write,
    // each in a savepoint of its own, so that the failing one rolls back alone.
    this.writeAll = db.transaction((batch: readonly StoredDecisionWrite[]) => {
      const followUpsOut: PendingFollowUp[] = [];
      return { results: batch.map((write) => store(write, followUpsOut)), followUpsOut };
    });
    const storeInSavepoint = db.transaction(store);
    this.writeEach = db.transaction((batch: readonly StoredDecisionWrite[]) => {
      const followUpsOut: PendingFollowUp[] = [];
      const results = batch.map((write): WriteResult => {
        const mark = followUpsOut.length;
        try {
          return storeInSavepoint(write, followUpsOut);
        } catch (error) {
          followUpsOut.length = mark;
          return { kind: "failed", message: error instanceof Error ? error.message : String(error) };
        }
      });
      return { results, followUpsOut };
    });
    const followUpInSavepoint = db.transaction((pending: PendingFollowUp): boolean => {
      const queuedEvents = followUps.run(pending.tenant, pending.payload);
      outbox.delete(pending.task);
      return queuedEvents;
    });
    this.followUpAll = db.transaction((pending: readonly PendingFollowUp[]) => {
      let failed = 0;
      let queuedEvents = false;
      for (const followUp of pending) {
        try {
          queuedEvents = followUpInSavepoint(followUp) || queuedEvents;
        } catch {
          // Its task stays: the outbox runner retries it after the grace period, then dead-letters it.
          failed++;
        }
      }
      return { failed, queuedEvents };
    });
  }

  /** Replaces a stored decision's details (its late comprehensive outcome), in a transaction of its own. */
  updateDetails(tenant: Tenant, decisionId: string, details: DecisionDetails): void {
    this.decisions.updateDetails(tenant, decisionId, details);
  }

  /**
   * Carries out the follow-ups an earlier writer left (the process or its
   * thread died between a batch's two transactions), before taking new
   * writes. Returns how many it carried out, and whether case events were
   * queued.
   */
  recover(): { recovered: number; queuedEvents: boolean } {
    let recovered = 0;
    let queuedEvents = false;
    for (let after = 0; ; ) {
      const tasks = this.outbox.pendingOfKind(DECISION_FOLLOW_UP_TASK, after, 500);
      const last = tasks.at(-1);
      if (!last) return { recovered, queuedEvents };
      after = last.id;
      // A task without a tenant is left to the outbox runner, which dead-letters it.
      const leftOver = tasks.flatMap((task) => (task.tenant ? [{ tenant: task.tenant, task: task.id, payload: JSON.parse(task.payload) as FollowUpPayload }] : []));
      this.pending = leftOver;
      const done = this.followUp();
      recovered += leftOver.length - done.failed;
      queuedEvents ||= done.queuedEvents;
    }
  }

  /** The first transaction; when the commit itself fails, none of the batch is stored. */
  write(batch: readonly StoredDecisionWrite[]): WriteResult[] {
    try {
      const { results, followUpsOut } = this.writeAll.immediate(batch);
      this.pending.push(...followUpsOut);
      return results;
    } catch {
      // One of the writes failed (or the commit): find out which, storing the others.
    }
    try {
      const { results, followUpsOut } = this.writeEach.immediate(batch);
      this.pending.push(...followUpsOut);
      return results;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return batch.map(() => ({ kind: "failed", message }));
    }
  }

  /**
   * The second transaction: the follow-ups of the batches {@link write} stored
   * since the last call. `failed` counts those left to the outbox runner;
   * `queuedEvents` says whether case events were queued for it to deliver.
   */
  followUp(): { failed: number; queuedEvents: boolean } {
    const pending = this.pending;
    this.pending = [];
    if (pending.length === 0) return { failed: 0, queuedEvents: false };
    try {
      return this.followUpAll.immediate(pending);
    } catch {
      return { failed: pending.length, queuedEvents: false };
    }
  }
}
