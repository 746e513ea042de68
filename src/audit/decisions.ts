import type { DecisionRecorder } from "../decisions/recorder.js";
import type { Outbox, TaskOutcome } from "../outbox/outbox.js";
import type { SqliteAuditStore } from "../store/audit.js";
import type { AuditFields } from "./entry.js";
import type { AuditTrail } from "./log.js";

/** Outbox task that appends a decision's audit entry after the response. */
export const AUDIT_DECISION_TASK = "audit.decision";

/**
 * Part 4.1's first side effect: a signed entry for every decision. The entry
 * is queued in the decide's own transaction and appended by the outbox runner,
 * so the decide path never waits on the installation-wide chain (one writer at
 * a time) and a crash cannot lose it. A replayed task finds its decision's
 * entry already there (one decision.made per decision, enforced by a unique
 * index) and stops.
 */
export function registerDecisionAudit(recorder: DecisionRecorder, outbox: Outbox, audit: AuditTrail, store: SqliteAuditStore): void {
  recorder.addHook(({ tenant, decision, actor }) => {
    const fields: AuditFields = {
      ...tenant,
      // The key that asked for the decision.
      actor,
      action: "decision.made",
      subject: decision.id,
      data: {
        requestId: decision.requestId,
        evidenceId: decision.evidenceId,
        userId: decision.userId,
        action: decision.action,
        decision: decision.decision,
        score: decision.score,
        confidence: decision.confidence,
        reasons: decision.details.reasons,
      },
    };
    outbox.enqueue(AUDIT_DECISION_TASK, tenant, fields);
  });
  // The entries of the decisions whose tasks run in one event-loop turn are appended in one transaction:
  // one commit (and one write lock) for the batch instead of one per decision.
  let waiting: Array<{ fields: AuditFields & { subject: string }; done: (error?: unknown) => void }> = [];
  const appendWaiting = () => {
    const batch = waiting;
    waiting = [];
    try {
      audit.atomically(() => {
        for (const { fields } of batch) if (!store.hasDecisionEntry(fields.subject)) audit.record(fields);
      });
    } catch (error) {
      for (const entry of batch) entry.done(error);
      return;
    }
    for (const entry of batch) entry.done();
  };
  outbox.register(AUDIT_DECISION_TASK, async (task): Promise<TaskOutcome> => {
    const fields = task.payload as AuditFields;
    const subject = fields.subject;
    if (subject === undefined) return { kind: "dead", error: "decision audit task without a decision id" };
    await new Promise<void>((resolve, reject) => {
      if (waiting.push({ fields: { ...fields, subject }, done: (error) => (error === undefined ? resolve() : reject(error)) }) === 1) {
        setImmediate(appendWaiting);
      }
    });
    return { kind: "done" };
  });
}
