import type { Db } from "../store/database.js";
import type { DecisionRepository, StoredDecision } from "../store/decisions.js";
import type { HistoryRepository, HistoryUpdate } from "../store/history.js";
import type { IdempotencyRepository, IdempotentResponse } from "../store/idempotency.js";
import type { Tenant } from "../store/tenant.js";
import type { PolicyTriggeredEventData, ShadowPolicyResult } from "../webhooks/events.js";
import type { AuditActor } from "../audit/entry.js";
import type { DecisionDetails } from "./record.js";

/** What the account's policies asked for beyond the decision itself. */
export interface PolicyEffects {
  /** A deciding rule's action was review: open a case whatever the score. */
  review: boolean;
  /** Rules that matched (active and shadow), for policy.triggered events. */
  triggered: Array<Omit<PolicyTriggeredEventData, "decisionId" | "requestId" | "userId" | "action" | "score">>;
  /** Shadow policies' results, for the decision event. */
  shadowResults: ShadowPolicyResult[];
}

export interface DecisionWrite {
  tenant: Tenant;
  /** The API key that asked for the decision (its id, never the key). */
  actor: AuditActor;
  decision: StoredDecision<DecisionDetails>;
  evidence: Record<string, unknown>;
  history: HistoryUpdate;
  policy: PolicyEffects;
  idempotency?: { key: string; entry: IdempotentResponse };
  now: number;
}

/** Work that must commit together with a decision (the outbox of later capabilities). */
export type DecisionWriteHook = (write: DecisionWrite) => void;

interface Pending {
  write: DecisionWrite;
  resolve(replayed: IdempotentResponse | undefined): void;
  reject(error: unknown): void;
}

/**
 * Writes a decide's state before the response: the decision, its evidence,
 * the history counters, the idempotency claim and whatever hooks add (the
 * outbox), atomically — all of a decision is stored or none of it.
 *
 * Group commit: the writes of all decides that reach this point in the same
 * event-loop turn share one SQLite transaction, each inside its own savepoint.
 * Every caller still waits for the commit before answering, so nothing is
 * answered that is not stored; under load one commit (and one WAL append)
 * serves many decisions instead of one each.
 */
export class DecisionRecorder {
  private readonly hooks: DecisionWriteHook[] = [];
  private readonly writeOne;
  private readonly writeBatch;
  private queue: Pending[] = [];

  constructor(
    db: Db,
    decisions: DecisionRepository<DecisionDetails>,
    history: HistoryRepository,
    idempotency: IdempotencyRepository,
  ) {
    // Nested inside writeBatch, this runs as a savepoint: a failing write rolls back alone.
    this.writeOne = db.transaction((write: DecisionWrite): IdempotentResponse | undefined => {
      if (write.idempotency && !idempotency.claim(write.tenant, write.idempotency.key, write.idempotency.entry, write.now)) {
        // A concurrent retry with the same key committed first: store nothing, replay its answer.
        return idempotency.find(write.tenant, write.idempotency.key, write.now);
      }
      decisions.insert(write.tenant, write.decision, write.evidence);
      history.record(write.tenant, write.history, write.now);
      for (const hook of this.hooks) hook(write);
      return undefined;
    });
    this.writeBatch = db.transaction((batch: Pending[]) => {
      const settle: Array<() => void> = [];
      for (const pending of batch) {
        try {
          const replayed = this.writeOne(pending.write);
          settle.push(() => pending.resolve(replayed));
        } catch (error) {
          settle.push(() => pending.reject(error));
        }
      }
      return settle;
    });
  }

  addHook(hook: DecisionWriteHook): void {
    this.hooks.push(hook);
  }

  /**
   * Stores the decision; resolves once it is committed, with the earlier
   * answer instead when an idempotent retry won the race.
   */
  record(write: DecisionWrite): Promise<IdempotentResponse | undefined> {
    return new Promise((resolve, reject) => {
      if (this.queue.length === 0) setImmediate(() => this.flush());
      this.queue.push({ write, resolve, reject });
    });
  }

  private flush(): void {
    const batch = this.queue;
    this.queue = [];
    let settle: Array<() => void>;
    try {
      settle = this.writeBatch.immediate(batch);
    } catch (error) {
      // The commit itself failed: none of the batch is stored.
      for (const pending of batch) pending.reject(error);
      return;
    }
    for (const done of settle) done();
  }
}
