import type { Db } from "../store/database.js";
import type { DecisionRepository, StoredDecision } from "../store/decisions.js";
import type { HistoryRepository, HistoryUpdate } from "../store/history.js";
import type { IdempotencyRepository, IdempotentResponse } from "../store/idempotency.js";
import type { Tenant } from "../store/tenant.js";
import type { DecisionDetails } from "./record.js";

export interface DecisionWrite {
  tenant: Tenant;
  decision: StoredDecision<DecisionDetails>;
  evidence: Record<string, unknown>;
  history: HistoryUpdate;
  idempotency?: { key: string; entry: IdempotentResponse };
  now: number;
}

/** Work that must commit together with a decision (the outbox of later capabilities). */
export type DecisionWriteHook = (write: DecisionWrite) => void;

/**
 * Writes a decide's state in one SQLite transaction before the response: the
 * decision, its evidence, the history counters, the idempotency claim and
 * whatever hooks add. Either all of it is stored or none.
 */
export class DecisionRecorder {
  private readonly hooks: DecisionWriteHook[] = [];
  private readonly write;

  constructor(
    db: Db,
    decisions: DecisionRepository<DecisionDetails>,
    history: HistoryRepository,
    idempotency: IdempotencyRepository,
  ) {
    this.write = db.transaction((write: DecisionWrite): IdempotentResponse | undefined => {
      if (write.idempotency && !idempotency.claim(write.tenant, write.idempotency.key, write.idempotency.entry, write.now)) {
        // A concurrent retry with the same key committed first: store nothing, replay its answer.
        return idempotency.find(write.tenant, write.idempotency.key, write.now);
      }
      decisions.insert(write.tenant, write.decision, write.evidence);
      history.record(write.tenant, write.history, write.now);
      for (const hook of this.hooks) hook(write);
      return undefined;
    });
  }

  addHook(hook: DecisionWriteHook): void {
    this.hooks.push(hook);
  }

  /** Stores the decision; returns the earlier answer instead when an idempotent retry won the race. */
  record(write: DecisionWrite): IdempotentResponse | undefined {
    return this.write.immediate(write);
  }
}
