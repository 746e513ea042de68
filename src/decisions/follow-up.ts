import { decisionAuditFields } from "../audit/decisions.js";
import type { AuditActor, AuditFields } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import { caseCreatedAuditFields } from "../cases/case-service.js";
import { outboxEntryOfJson, type Outbox, type OutboxEntry, type OutboxTable, type TaskOutcome } from "../outbox/outbox.js";
import type { SqliteAuditStore } from "../store/audit.js";
import { CaseRepository, type NewCase } from "../store/cases.js";
import type { Db } from "../store/database.js";
import type { Tenant } from "../store/tenant.js";
import type { StoredDecision } from "../store/decisions.js";
import type { DecisionDetails } from "./record.js";

/**
 * Outbox task of what follows the decisions of one batch and account once
 * they are answered: their signed audit entries and, at score 80 and above
 * (or on a review rule), their cases with the cases' audit entries and
 * `case.created` events.
 *
 * The task is written in the decide's own transaction, so it survives a crash.
 * The decision writer carries it out within a few milliseconds of that
 * transaction, the answers already on their way, in a second transaction shared
 * by the batches answered meanwhile (decision-store.ts, writer-worker.ts);
 * the outbox runner only takes a task the writer has not removed after {@link FOLLOW_UP_GRACE_MS} (its thread died, or the follow-up
 * failed and goes through the runner's retries and dead letters). Both run
 * {@link DecisionFollowUps.run}, which is idempotent: one decision.made entry
 * per decision (a unique index) and one case per decision.
 */
export const DECISION_FOLLOW_UP_TASK = "decision.follow-up";
/** How long the outbox runner leaves a follow-up to the decision writer. */
const FOLLOW_UP_GRACE_MS = 10_000;

/** What follows one decision. */
export interface FollowUp {
  /** The decision's decision.made entry, stamped with the decision's time (also the case's creation time). */
  audit: AuditFields & { subject: string; at: number };
  openCase?: NewCase;
  /** The case's case.created event, built on the request thread (where the event sinks are) at decide time. */
  caseEvents: OutboxEntry[];
}

/** A follow-up task's payload: the follow-ups of one batch's decisions of one account and environment. */
interface FollowUpPayload {
  followUps: FollowUp[];
}

/**
 * A stored follow-up task's account and decisions, or why it is not one
 * (the runner dead-letters it; the writer's recovery leaves it to the runner).
 */
export function followUpGroupOf(task: { tenant: Tenant | undefined; payload: unknown }): { tenant: Tenant; followUps: FollowUp[] } | { problem: string } {
  if (!task.tenant) return { problem: "decision follow-up without a tenant" };
  const { payload } = task;
  const followUps = typeof payload === "object" && payload !== null ? (payload as Partial<FollowUpPayload>).followUps : undefined;
  if (!Array.isArray(followUps)) return { problem: "decision follow-up without its list of follow-ups" };
  return { tenant: task.tenant, followUps };
}

/** What follows a decision, as the request thread prepares it with the decision's write (and its evidence's integrity hash). */
export function followUpOf(
  write: { tenant: Tenant; actor: AuditActor; decision: StoredDecision<DecisionDetails>; openCase?: NewCase | undefined; now: number },
  caseEvents: OutboxEntry[],
  evidenceIntegrityHash: string,
): FollowUp {
  return {
    audit: { ...decisionAuditFields(write, evidenceIntegrityHash), at: write.now },
    ...(write.openCase && { openCase: write.openCase }),
    caseEvents,
  };
}

/**
 * The follow-up task of decisions of one account and environment, as inserted
 * in the decide's transaction, from each follow-up's JSON (serialised on the
 * request thread): the text JSON.stringify would give a {@link FollowUpPayload}.
 */
export function followUpTask(tenant: Tenant, followUpsJson: readonly string[], now: number): OutboxEntry {
  return outboxEntryOfJson(DECISION_FOLLOW_UP_TASK, tenant, `{"followUps":[${followUpsJson.join(",")}]}`, now, { runAt: now + FOLLOW_UP_GRACE_MS });
}

/**
 * Where a decision's follow-up stands when its audit entry is missing: still to run (its task waits in the
 * outbox, as after a crash), failed for good (a dead letter), or neither (undefined: done, or never queued).
 */
export function followUpStateOf(outbox: OutboxTable, tenant: Tenant, decisionId: string): "pending" | "dead" | undefined {
  // Each follow-up's audit fields name the decision as their subject.
  return outbox.statusOf(DECISION_FOLLOW_UP_TASK, tenant, `"subject":${JSON.stringify(decisionId)}`);
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
   * Inside the caller's transaction; does nothing that was done already. The
   * entries go in one append, in order: each decision's, then its case's.
   * True when it queued case events for the outbox runner to deliver.
   */
  run(tenant: Tenant, followUps: readonly FollowUp[]): boolean {
    const entries: AuditFields[] = [];
    let queuedEvents = false;
    for (const { audit, openCase, caseEvents } of followUps) {
      if (!this.auditStore.hasDecisionEntry(audit.subject)) entries.push(audit);
      if (!openCase || !this.cases.open(tenant, openCase, audit.at)) continue;
      entries.push({ ...caseCreatedAuditFields(tenant, openCase), at: audit.at });
      for (const event of caseEvents) this.outbox.insert(event);
      queuedEvents ||= caseEvents.length > 0;
    }
    this.audit.recordAll(entries);
    return queuedEvents;
  }

  /** As {@link run}, in a transaction of its own. */
  runAtomically(tenant: Tenant, followUps: readonly FollowUp[]): boolean {
    return this.audit.atomically(() => this.run(tenant, followUps));
  }
}

/** The outbox runner's side: follow-ups the writer did not carry out. */
export function registerFollowUpTask(outbox: Outbox, followUps: DecisionFollowUps): void {
  // Its dead letters outlive the retention: feedback on a decision without its audit entry reads one to answer
  // "replay it" rather than refuse the evidence as tampered with (feedback/processor.ts).
  outbox.register(DECISION_FOLLOW_UP_TASK, async (task): Promise<TaskOutcome> => {
    const group = followUpGroupOf(task);
    if ("problem" in group) return { kind: "dead", error: group.problem };
    followUps.runAtomically(group.tenant, group.followUps);
    return { kind: "done" };
  }, { keepDeadLetters: true });
}
