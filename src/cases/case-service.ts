import type { AuditActor, AuditFields } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import type { EventPublisher } from "../events/publisher.js";
import { newId } from "../ids.js";
import type { CaseRepository, NewCase, StoredCase } from "../store/cases.js";
import type { Db } from "../store/database.js";
import type { Tenant } from "../store/tenant.js";
import type { CaseSummary } from "../webhooks/events.js";
import { CASE_SCORE_THRESHOLD, canTransition, isClosed, priorityFromScore, allowedTransitions, type CaseStatus } from "./lifecycle.js";


/**
 * The case a decision opens (part 3.2: score at or above 80; or its deciding
 * policy rule said review), or undefined.
 */
export function caseForDecision(
  decision: { id: string; userId: string; score: number; decision: string; reasons: string[] },
  review: boolean,
): NewCase | undefined {
  if (decision.score < CASE_SCORE_THRESHOLD && !review) return undefined;
  return {
    id: newId("case"),
    decisionId: decision.id,
    userId: decision.userId,
    priority: priorityFromScore(decision.score),
    score: decision.score,
    decision: decision.decision,
    reasons: decision.reasons,
  };
}

/** A newly opened case as stored and shown: open, unassigned, no notes. */
export function openedCase(opened: NewCase, now: number): StoredCase {
  return { ...opened, status: "open", assignee: "", notes: [], createdAt: now, updatedAt: now };
}

/** The signed audit entry of a case opened by a decision. */
export function caseCreatedAuditFields(tenant: Tenant, opened: NewCase): AuditFields {
  return { ...tenant, actor: "system", action: "case.created", subject: opened.id, data: { decisionId: opened.decisionId, priority: opened.priority, score: opened.score } };
}

export interface CaseChange {
  status?: CaseStatus;
  assignee?: string;
  note?: string;
  /** Key id or "cli": who made the change. */
  actor: AuditActor;
}

/** A change the case's state does not allow: a transition it cannot make, a note past {@link MAX_CASE_NOTES}. */
export class CaseConflictError extends Error {}

/**
 * Notes one case may hold. A case is read and written whole (its notes are one column), and listed with
 * them: the bound keeps a case, and a page of 100 of them, from growing with every note an analyst adds.
 */
export const MAX_CASE_NOTES = 100;

export function caseSummary(stored: StoredCase): CaseSummary {
  return {
    id: stored.id,
    status: stored.status,
    priority: stored.priority,
    score: stored.score,
    decision: stored.decision as CaseSummary["decision"],
    reasons: stored.reasons,
    decisionId: stored.decisionId,
    userId: stored.userId,
    createdAt: new Date(stored.createdAt).toISOString(),
    updatedAt: new Date(stored.updatedAt).toISOString(),
  };
}

/**
 * Moving cases along their lifecycle, with their events and audit entries.
 * (Cases are opened by the decision writer, as their decisions' follow-ups.)
 */
export class CaseService {
  private readonly updateTx;

  constructor(
    db: Db,
    private readonly cases: CaseRepository,
    private readonly events: EventPublisher,
    private readonly clock: Clock,
    private readonly audit: AuditTrail,
  ) {
    this.updateTx = db.transaction((tenant: Tenant, id: string, change: CaseChange): StoredCase | undefined => {
      const current = this.cases.get(tenant, id);
      if (!current) return undefined;
      const now = this.clock.now();
      const updated: StoredCase = { ...current, updatedAt: now, notes: [...current.notes] };
      if (change.status !== undefined && change.status !== current.status) {
        if (!canTransition(current.status, change.status)) {
          throw new CaseConflictError(
            `a case cannot go from ${current.status} to ${change.status}; from ${current.status} it can go to ${allowedTransitions(current.status).join(", ")}`,
          );
        }
        updated.status = change.status;
      }
      if (change.assignee !== undefined) updated.assignee = change.assignee;
      if (change.note) {
        if (current.notes.length >= MAX_CASE_NOTES) {
          throw new CaseConflictError(`case ${id} holds ${current.notes.length} notes, and ${MAX_CASE_NOTES} are the most allowed; nothing of this change was applied`);
        }
        updated.notes.push({ text: change.note, createdAt: now });
      }
      this.cases.save(tenant, updated);
      this.audit.record({
        ...tenant,
        actor: change.actor,
        action: "case.updated",
        subject: id,
        data: { status: updated.status, previousStatus: current.status, assignee: updated.assignee, note: change.note ?? "" },
      });
      if (updated.status !== current.status && isClosed(updated.status)) {
        this.events.publish(tenant, "case.resolved", { case: caseSummary(updated), previousStatus: current.status, resolvedBy: change.actor });
      }
      return updated;
    });
  }

  /** Applies a change; undefined when the case does not exist for this tenant. */
  update(tenant: Tenant, id: string, change: CaseChange): StoredCase | undefined {
    return this.updateTx.immediate(tenant, id, change);
  }
}
