import { decisionAuditFields } from "../audit/decisions.js";
import type { AuditFields } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import { caseCreatedAuditFields, type NewCase } from "../cases/case-service.js";
import { outboxEntry, type Outbox, type OutboxEntry, type OutboxTable, type TaskOutcome } from "../outbox/outbox.js";
import type { SqliteAuditStore } from "../store/audit.js";
import { CaseRepository } from "../store/cases.js";
import type { Db } from "../store/database.js";
import type { Tenant } from "../store/tenant.js";
import type { StoredDecisionWrite } from "./decision-store.js";

/**
 * Outbox task of what follows a decision once it is answered: its signed audit
 * entry and, at score 80 and above (or on a review rule), its case with the
 * case's audit entry and `case.created` event.
 *
 * The task is written in the decide's own transaction, so it survives a crash.
 * The decision writer carries it out within a few milliseconds of that
 * transaction, the answer already on its way, in a second transaction shared
 * by the batches answered meanwhile (decision-store.ts, writer-worker.ts);
 * the outbox runner only takes a task the writer has not removed after {@link FOLLOW_UP_GRACE_MS} (its thread died, or the follow-up
 * failed and goes through the runner's retries and dead letters). Both run
 * {@link DecisionFollowUps.run}, which is idempotent: one decision.made entry
 * per decision (a unique index) and one case per decision.
 */
export const DECISION_FOLLOW_UP_TASK = "decision.follow-up";
/** How long the outbox runner leaves a follow-up to the decision writer. */
export const FOLLOW_UP_GRACE_MS = 10_000;

export interface FollowUpPayload {
  /** The decision's decision.made entry, stamped with the decision's time (also the case's creation time). */
  audit: AuditFields & { subject: string; at: number };
  openCase?: NewCase;
  /** The case's case.created event, built on the request thread (where the event sinks are) at decide time. */
  caseEvents: OutboxEntry[];
}

/** The follow-up of a write, and its task as inserted in the decide's transaction. */
export function followUpOf(write: StoredDecisionWrite): { payload: FollowUpPayload; entry: OutboxEntry } {
  const payload: FollowUpPayload = {
    audit: { ...decisionAuditFields(write), at: write.now },
    ...(write.openCase && { openCase: write.openCase }),
    caseEvents: write.caseEvents,
  };
  return { payload, entry: outboxEntry(DECISION_FOLLOW_UP_TASK, write.tenant, payload, write.now, write.now + FOLLOW_UP_GRACE_MS) };
}

/** Carries out follow-ups over one connection: the writer's, or the request thread's for the outbox runner. */
export class DecisionFollowUps {
  private readonly cases;

  constructor(
    db: Db,
    private readonly auditStore: SqliteAuditStore,
    private readonly audit: AuditTrail,
    private readonly outbox: OutboxTable,
  ) {
    this.cases = new CaseRepository(db);
  }

  /**
   * Inside the caller's transaction; does nothing that was done already.
   * True when it queued case events for the outbox runner to deliver.
   */
  run(tenant: Tenant, payload: FollowUpPayload): boolean {
    if (!this.auditStore.hasDecisionEntry(payload.audit.subject)) this.audit.record(payload.audit);
    const opened = payload.openCase;
    if (!opened || !this.cases.open(tenant, opened, payload.audit.at)) return false;
    this.audit.record({ ...caseCreatedAuditFields(tenant, opened), at: payload.audit.at });
    for (const event of payload.caseEvents) this.outbox.insert(event);
    return payload.caseEvents.length > 0;
  }

  /** As {@link run}, in a transaction of its own. */
  runAtomically(tenant: Tenant, payload: FollowUpPayload): boolean {
    return this.audit.atomically(() => this.run(tenant, payload));
  }
}

/** The outbox runner's side: follow-ups the writer did not carry out. */
export function registerFollowUpTask(outbox: Outbox, followUps: DecisionFollowUps): void {
  outbox.register(DECISION_FOLLOW_UP_TASK, async (task): Promise<TaskOutcome> => {
    if (!task.tenant) return { kind: "dead", error: "decision follow-up without a tenant" };
    followUps.runAtomically(task.tenant, task.payload as FollowUpPayload);
    return { kind: "done" };
  });
}
