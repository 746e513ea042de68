import type { AuditActor } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import type { EventPublisher } from "../events/publisher.js";
import { newId } from "../ids.js";
import type { Outbox, TaskOutcome } from "../outbox/outbox.js";
import type { CaseRepository, StoredCase } from "../store/cases.js";
import type { Db } from "../store/database.js";
import type { Tenant } from "../store/tenant.js";
import type { CaseSummary } from "../webhooks/events.js";
import { CASE_SCORE_THRESHOLD, canTransition, isClosed, priorityFromScore, allowedTransitions, type CaseStatus } from "./lifecycle.js";

/** Outbox task that opens the case of an elevated-risk decision. */
export const OPEN_CASE_TASK = "case.open";

export interface OpenCasePayload {
  decisionId: string;
  userId: string;
  score: number;
  decision: "allow" | "challenge" | "deny";
  reasons: string[];
}

export interface CaseChange {
  status?: CaseStatus;
  assignee?: string;
  note?: string;
  /** Key id or "cli": who made the change. */
  actor: AuditActor;
}

export class CaseTransitionError extends Error {}

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

/** Opening cases from decisions and moving them along their lifecycle, with their events. */
export class CaseService {
  private readonly openTx;
  private readonly updateTx;

  constructor(
    db: Db,
    private readonly cases: CaseRepository,
    outbox: Outbox,
    private readonly events: EventPublisher,
    private readonly clock: Clock,
    private readonly audit: AuditTrail,
  ) {
    this.openTx = db.transaction((tenant: Tenant, payload: OpenCasePayload) => {
      const now = this.clock.now();
      const id = newId("case");
      const opened = this.cases.open(tenant, { id, ...payload, priority: priorityFromScore(payload.score) }, now);
      // Replayed task (crash after commit): the case exists, and so does its event.
      if (!opened) return;
      const created = this.cases.get(tenant, id) as StoredCase;
      this.events.publish(tenant, "case.created", { case: caseSummary(created) });
      this.audit.record({ ...tenant, actor: "system", action: "case.created", subject: id, data: { decisionId: payload.decisionId, priority: created.priority, score: created.score } });
    });
    this.updateTx = db.transaction((tenant: Tenant, id: string, change: CaseChange): StoredCase | undefined => {
      const current = this.cases.get(tenant, id);
      if (!current) return undefined;
      const now = this.clock.now();
      const updated: StoredCase = { ...current, updatedAt: now, notes: [...current.notes] };
      if (change.status !== undefined && change.status !== current.status) {
        if (!canTransition(current.status, change.status)) {
          throw new CaseTransitionError(
            `a case cannot go from ${current.status} to ${change.status}; from ${current.status} it can go to ${allowedTransitions(current.status).join(", ")}`,
          );
        }
        updated.status = change.status;
      }
      if (change.assignee !== undefined) updated.assignee = change.assignee;
      if (change.note) updated.notes.push({ text: change.note, createdAt: now });
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
    outbox.register(OPEN_CASE_TASK, async (task): Promise<TaskOutcome> => {
      if (!task.tenant) return { kind: "dead", error: "case task without a tenant" };
      this.openTx.immediate(task.tenant, task.payload as OpenCasePayload);
      return { kind: "done" };
    });
  }

  /** Whether a decision opens a case (part 3.2: score at or above 80). */
  static opensCase(score: number): boolean {
    return score >= CASE_SCORE_THRESHOLD;
  }

  /** Applies a change; undefined when the case does not exist for this tenant. */
  update(tenant: Tenant, id: string, change: CaseChange): StoredCase | undefined {
    return this.updateTx.immediate(tenant, id, change);
  }
}
