import { AuditLog } from "../audit/log.js";
import type { AuditSigner } from "../audit/signer.js";
import { systemClock } from "../clock.js";
import { graphKeysOf, type EntityKeys } from "../graph/entities.js";
import { OutboxTable, type OutboxEntry } from "../outbox/outbox.js";
import { SqliteAuditStore } from "../store/audit.js";
import type { Db } from "../store/database.js";
import { DecisionRepository, type DecisionRowWrite } from "../store/decisions.js";
import { GraphRepository } from "../store/graph.js";
import { HistoryRepository, type HistoryUpdate } from "../store/history.js";
import { IdempotencyRepository, type IdempotentResponse } from "../store/idempotency.js";
import type { Tenant } from "../store/tenant.js";
import { DECISION_FOLLOW_UP_TASK, DecisionFollowUps, followUpGroupOf, followUpTask, type FollowUp } from "./follow-up.js";

/**
 * Everything a decide stores, as the request thread prepares it for the
 * decision writer (writer.ts): plain data, the large parts already serialised
 * (JSON of the record, canonical evidence and its hash), so that the writer's
 * thread spends its time storing rather than serialising.
 */
export interface StoredDecisionWrite {
  tenant: Tenant;
  decision: DecisionRowWrite;
  history: HistoryUpdate;
  /** The keys of the decision's entities, for the history's counters and the fraud graph. */
  entityKeys: EntityKeys;
  idempotency?: { key: string; entry: IdempotentResponse };
  /** The side effects' outbox tasks (events), collected on the request thread, stored with the decision. */
  outbox: OutboxEntry[];
  /**
   * What follows the answer (the audit entry, the case and its events:
   * follow-up.ts), as JSON: it goes into the follow-up task's payload as it is,
   * and is parsed for the follow-up transaction.
   */
  followUpJson: string;
  /** The request thread's clock at the decision: every stored time comes from it. */
  now: number;
}

/** What became of one write. */
export type WriteResult =
  | { kind: "stored" }
  /** A concurrent retry with the same Idempotency-Key committed first: nothing was stored; answer with its response. */
  | { kind: "replayed"; response: IdempotentResponse }
  | { kind: "failed"; message: string };

/** What became of a batch's writes, in order. */
export interface WriteReport {
  results: WriteResult[];
  /** Why the batch's one transaction failed, when it was then written again write by write. */
  retriedAfter?: string;
}

/** What became of the follow-ups: how many decisions' failed (left to the outbox runner), and the first error. */
export interface FollowUpReport {
  failed: number;
  queuedEvents: boolean;
  error?: string;
  /** Why the one transaction for all groups failed, when they were then carried out group by group. */
  retriedAfter?: string;
}

/** The follow-ups of a batch's stored decisions of one account and environment, with their task. */
interface PendingFollowUps {
  tenant: Tenant;
  task: number;
  followUps: FollowUp[];
}

/**
 * A decide's state in two transactions, both on the decision writer's thread
 * (writer-worker.ts) and its connection.
 *
 * The first, before the answer: the decision, its evidence, the history
 * counters, the graph edges, the idempotency claim and the side effects'
 * outbox tasks — all of a decision or none of it — and, for the decisions
 * stored, one follow-up task per account and environment. A batch of writes
 * shares it (group commit); a failing write rolls back alone.
 *
 * The second, once the answers are on their way: the batches' follow-ups (the
 * signed audit entries, the cases), each task's removing it. A crash in
 * between leaves the tasks: the next writer thread carries them out before
 * taking new writes ({@link recover}), or the outbox runner once they are past
 * their grace period.
 */
export class DecisionStore {
  private readonly writeAll;
  private readonly writeEach;
  private readonly followUpAll;
  private readonly followUpEach;
  private readonly outbox;
  private readonly decisions;
  /** Follow-ups of the batches written since the last {@link followUp}. */
  private pending: PendingFollowUps[] = [];

  constructor(db: Db, signer: AuditSigner) {
    const decisions = new DecisionRepository(db);
    this.decisions = decisions;
    const history = new HistoryRepository(db);
    const idempotency = new IdempotencyRepository(db);
    const graph = new GraphRepository(db);
    const outbox = new OutboxTable(db);
    this.outbox = outbox;
    const auditStore = new SqliteAuditStore(db);
    // Entries carry the decision's time (AuditFields.at); the clock only stamps what has none.
    const followUps = new DecisionFollowUps(db, auditStore, new AuditLog(auditStore, signer, systemClock), outbox);

    const store = (write: StoredDecisionWrite): WriteResult => {
      const { tenant, now } = write;
      if (write.idempotency && !idempotency.claim(tenant, write.idempotency.key, write.idempotency.entry, now)) {
        const earlier = idempotency.find(tenant, write.idempotency.key, now);
        if (earlier) return { kind: "replayed", response: earlier };
        throw new Error("the Idempotency-Key was claimed but its answer is gone");
      }
      decisions.insert(tenant, write.decision);
      history.record(tenant, write.history, write.entityKeys, now);
      graph.recordEdges(tenant, write.decision.id, graphKeysOf(write.entityKeys), now);
      for (const entry of write.outbox) outbox.insert(entry);
      return { kind: "stored" };
    };
    // One follow-up task per account and environment of the batch, for its stored decisions.
    const storeFollowUps = (batch: readonly StoredDecisionWrite[], results: readonly WriteResult[]): PendingFollowUps[] => {
      const byTenant = new Map<string, { tenant: Tenant; followUps: FollowUp[]; json: string[]; now: number }>();
      batch.forEach((write, index) => {
        if (results[index]?.kind !== "stored") return;
        const key = `${write.tenant.accountId}/${write.tenant.environment}`;
        const group = byTenant.get(key);
        const followUp = JSON.parse(write.followUpJson) as FollowUp;
        if (group) {
          group.followUps.push(followUp);
          group.json.push(write.followUpJson);
        } else {
          byTenant.set(key, { tenant: write.tenant, followUps: [followUp], json: [write.followUpJson], now: write.now });
        }
      });
      return [...byTenant.values()].map(({ tenant, followUps, json, now }) => ({
        tenant,
        followUps,
        task: outbox.insert(followUpTask(tenant, json, now)),
      }));
    };
    // Writes nearly always succeed: the whole batch goes first without a savepoint per write (two statements
    // each). When one fails, that transaction rolls back and the batch is written again write by write,
    // each in a savepoint of its own, so that the failing one rolls back alone.
    this.writeAll = db.transaction((batch: readonly StoredDecisionWrite[]) => {
      const results = batch.map(store);
      return { results, followUps: storeFollowUps(batch, results) };
    });
    const storeInSavepoint = db.transaction(store);
    this.writeEach = db.transaction((batch: readonly StoredDecisionWrite[]) => {
      const results = batch.map((write): WriteResult => {
        try {
          return storeInSavepoint(write);
        } catch (error) {
          return { kind: "failed", message: messageOf(error) };
        }
      });
      return { results, followUps: storeFollowUps(batch, results) };
    });
    const followUpGroup = (pending: PendingFollowUps): boolean => {
      const queuedEvents = followUps.run(pending.tenant, pending.followUps);
      outbox.delete(pending.task);
      return queuedEvents;
    };
    // Likewise, the groups of follow-ups (one per account and environment) go first without a savepoint each:
    // a savepoint's journal copies every page the group changes, and past 64 KiB SQLite spills it to a new
    // temporary file. When one group fails, each goes again in a savepoint of its own.
    this.followUpAll = db.transaction((pending: readonly PendingFollowUps[]): FollowUpReport => {
      let queuedEvents = false;
      for (const group of pending) queuedEvents = followUpGroup(group) || queuedEvents;
      return { failed: 0, queuedEvents };
    });
    const followUpInSavepoint = db.transaction(followUpGroup);
    this.followUpEach = db.transaction((pending: readonly PendingFollowUps[]): FollowUpReport => {
      let failed = 0;
      let queuedEvents = false;
      let firstError: string | undefined;
      for (const group of pending) {
        try {
          queuedEvents = followUpInSavepoint(group) || queuedEvents;
        } catch (error) {
          // Its task stays: the outbox runner retries it after the grace period, then dead-letters it.
          failed += group.followUps.length;
          firstError ??= messageOf(error);
        }
      }
      return { failed, queuedEvents, ...(firstError !== undefined && { error: firstError }) };
    });
  }

  /** Replaces a stored decision's record (its late comprehensive outcome), in a transaction of its own. */
  updateRecord(tenant: Tenant, decisionId: string, record: string): void {
    this.decisions.updateRecord(tenant, decisionId, record);
  }

  /**
   * Carries out the follow-ups an earlier writer left (the process or its
   * thread died between a batch's two transactions), before taking new
   * writes. Returns how many decisions' follow-ups it carried out, and whether
   * case events were queued.
   */
  recover(): { recovered: number; queuedEvents: boolean } {
    let recovered = 0;
    let queuedEvents = false;
    for (let after = 0; ; ) {
      const tasks = this.outbox.pendingOfKind(DECISION_FOLLOW_UP_TASK, after, 100);
      const last = tasks.at(-1);
      if (!last) return { recovered, queuedEvents };
      after = last.id;
      // A task without a tenant, or not a follow-up's payload, is left to the outbox runner, which dead-letters it.
      const leftOver = tasks.flatMap((task) => {
        const group = followUpGroupOf(task);
        return "problem" in group ? [] : [{ ...group, task: task.id }];
      });
      const done = this.runFollowUps(leftOver);
      recovered += leftOver.reduce((sum, group) => sum + group.followUps.length, 0) - done.failed;
      queuedEvents ||= done.queuedEvents;
    }
  }

  /** The first transaction; when the commit itself fails, none of the batch is stored. */
  write(batch: readonly StoredDecisionWrite[]): WriteReport {
    const outcome = wholeThenParts(() => this.writeAll.immediate(batch), () => this.writeEach.immediate(batch));
    if ("error" in outcome) {
      const message = messageOf(outcome.error);
      return { results: batch.map(() => ({ kind: "failed", message })) };
    }
    this.pending.push(...outcome.value.followUps);
    return { results: outcome.value.results, ...(outcome.retriedAfter !== undefined && { retriedAfter: outcome.retriedAfter }) };
  }

  /**
   * The second transaction: the follow-ups of the batches {@link write} stored
   * since the last call. `failed` counts the decisions whose follow-ups are
   * left to the outbox runner; `queuedEvents` says whether case events were
   * queued for it to deliver.
   */
  followUp(): FollowUpReport {
    const pending = this.pending;
    this.pending = [];
    return this.runFollowUps(pending);
  }

  private runFollowUps(pending: readonly PendingFollowUps[]): FollowUpReport {
    if (pending.length === 0) return { failed: 0, queuedEvents: false };
    const outcome = wholeThenParts(() => this.followUpAll.immediate(pending), () => this.followUpEach.immediate(pending));
    // Failed ones keep their tasks in the outbox: its runner retries them after the grace period.
    if ("error" in outcome) {
      return { failed: pending.reduce((sum, group) => sum + group.followUps.length, 0), queuedEvents: false, error: messageOf(outcome.error) };
    }
    return { ...outcome.value, ...(outcome.retriedAfter !== undefined && { retriedAfter: outcome.retriedAfter }) };
  }
}

/**
 * The batch's one transaction, which nearly always succeeds; when it fails,
 * the part-by-part one, which finds what failed and keeps the rest, and why
 * the first failed. Not when the database stayed locked: a second attempt
 * would wait as long again and find the same, with callers waiting meanwhile.
 */
function wholeThenParts<T>(whole: () => T, parts: () => T): { value: T; retriedAfter?: string } | { error: unknown } {
  let firstError: unknown;
  try {
    return { value: whole() };
  } catch (error) {
    firstError = error;
  }
  if (isLocked(firstError)) return { error: firstError };
  try {
    return { value: parts(), retriedAfter: messageOf(firstError) };
  } catch (error) {
    return { error };
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The database stayed locked for the whole busy_timeout. */
function isLocked(error: unknown): boolean {
  return error instanceof Error && "code" in error && typeof error.code === "string" && error.code.startsWith("SQLITE_BUSY");
}
