/** Case statuses (part 2.5) and the transitions an analyst may make between them. */
export type CaseStatus = "open" | "investigating" | "escalated" | "resolved" | "dismissed";
export type CasePriority = "critical" | "high" | "medium" | "low";

/**
 * Work moves forward (open → investigating → escalated) and ends in resolved
 * or dismissed from any working state; a closed case can only be reopened.
 */
const TRANSITIONS: Record<CaseStatus, readonly CaseStatus[]> = {
  open: ["investigating", "escalated", "resolved", "dismissed"],
  investigating: ["escalated", "resolved", "dismissed", "open"],
  escalated: ["investigating", "resolved", "dismissed"],
  resolved: ["open"],
  dismissed: ["open"],
};

export function canTransition(from: CaseStatus, to: CaseStatus): boolean {
  return TRANSITIONS[from].includes(to);
}

export function allowedTransitions(from: CaseStatus): readonly CaseStatus[] {
  return TRANSITIONS[from];
}

/** Closing a case (to resolved or dismissed) emits case.resolved. */
export function isClosed(status: CaseStatus): boolean {
  return status === "resolved" || status === "dismissed";
}

/** Cases open from score 80; the priority says how far above it the decision was. */
export const CASE_SCORE_THRESHOLD = 80;

export function priorityFromScore(score: number): CasePriority {
  if (score >= 95) return "critical";
  if (score >= 90) return "high";
  if (score >= 85) return "medium";
  return "low";
}
