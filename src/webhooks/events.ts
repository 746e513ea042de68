import type { Environment } from "../auth/keys.js";
import type { Clock } from "../clock.js";
import { newId } from "../ids.js";
import type { CasePriority, CaseStatus } from "../cases/lifecycle.js";
import type { Decision } from "../engine/score.js";

/** The eight event types of the specification (part 6). */
export const EVENT_TYPES = [
  "decision.allow",
  "decision.challenge",
  "decision.deny",
  "case.created",
  "case.resolved",
  "policy.triggered",
  "feedback.received",
  "anomaly.detected",
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

export type { Decision };

/** What a policy in shadow mode would have done; the specification puts these in webhook payloads. */
export interface ShadowPolicyResult {
  policyId: string;
  policyName: string;
  /** The decision the policy would have produced had it been active. */
  decision: Decision;
  /** Indexes into the policy's rules of the rules that matched. */
  matchedRules: number[];
}

/** decision.allow, decision.challenge and decision.deny. */
export interface DecisionEventData {
  decisionId: string;
  requestId: string;
  evidenceId: string;
  userId: string;
  /** The end-user action decided on (login, checkout, ...). */
  action: string;
  decision: Decision;
  score: number;
  confidence: number;
  reasons: string[];
  /** The active policy whose rule set the decision, when one did. */
  policyId?: string;
  shadowResults: ShadowPolicyResult[];
}

export interface CaseSummary {
  id: string;
  status: CaseStatus;
  priority: CasePriority;
  score: number;
  decision: Decision;
  reasons: string[];
  decisionId: string;
  userId: string;
  /** ISO 8601. */
  createdAt: string;
  /** ISO 8601. */
  updatedAt: string;
}

/** case.created: the case as created. */
export interface CaseCreatedEventData {
  case: CaseSummary;
}

/**
 * case.resolved: sent when an analyst closes a case, to resolved or to
 * dismissed (both end the investigation; `case.status` says which).
 */
export interface CaseResolvedEventData {
  case: CaseSummary;
  /** Previous status. */
  previousStatus: CaseStatus;
  /** Who closed it: the id of the API key that made the change (cases change through the API only). */
  resolvedBy: string;
}

/** policy.triggered: one event per policy with a matching rule, active or shadow. */
export interface PolicyTriggeredEventData {
  policyId: string;
  policyName: string;
  policyStatus: "active" | "shadow";
  /** Index of the first matching rule in the policy's rules. */
  ruleIndex: number;
  rule: { condition: string; action: string; description: string };
  /** False for a shadow policy: the rule matched but did not change the decision. */
  applied: boolean;
  decisionId: string;
  requestId: string;
  userId: string;
  action: string;
  score: number;
}

export type ActualOutcome = "fraud" | "legitimate" | "chargeback" | "abuse" | "valid";

/** feedback.received. */
export interface FeedbackReceivedEventData {
  feedbackId: string;
  decisionId: string;
  userId: string;
  actualOutcome: ActualOutcome;
  /** 0 to 1. */
  confidence: number;
  /** The original decision the label is about. */
  decision: Decision;
  score: number;
}

/** anomaly.detected: a metric departed from its baseline. What is watched is the detector's choice. */
export interface AnomalyDetectedEventData {
  anomalyId: string;
  /** Machine-readable name of the pattern, e.g. "deny_rate_spike" or "velocity_burst". */
  kind: string;
  severity: "low" | "medium" | "high";
  description: string;
  /** The end user concerned, for per-user patterns. */
  userId?: string;
  /** Observed and baseline values behind the detection. */
  metrics: Record<string, number>;
  /** ISO 8601 bounds of the observation window. */
  windowStart: string;
  windowEnd: string;
}

export interface EventDataByType {
  "decision.allow": DecisionEventData;
  "decision.challenge": DecisionEventData;
  "decision.deny": DecisionEventData;
  "case.created": CaseCreatedEventData;
  "case.resolved": CaseResolvedEventData;
  "policy.triggered": PolicyTriggeredEventData;
  "feedback.received": FeedbackReceivedEventData;
  "anomaly.detected": AnomalyDetectedEventData;
}

/** The JSON body of every delivery. */
export interface WebhookEvent<T extends EventType = EventType> {
  /** evt_ and 22 base62 characters; the same on every retry, so receivers deduplicate on it. */
  id: string;
  type: T;
  /** When the event happened (ISO 8601, UTC); unchanged by retries. */
  createdAt: string;
  environment: Environment;
  /** The account the event belongs to; absent for installation-wide events. */
  accountId?: string;
  data: EventDataByType[T];
}

/** The event type of a decision. */
export function decisionEventType(decision: Decision): "decision.allow" | "decision.challenge" | "decision.deny" {
  return `decision.${decision}`;
}

export function buildEvent<T extends EventType>(
  type: T,
  data: EventDataByType[T],
  scope: { environment: Environment; accountId?: string | undefined },
  clock: Clock,
): WebhookEvent<T> {
  return {
    id: newId("evt"),
    type,
    createdAt: new Date(clock.now()).toISOString(),
    environment: scope.environment,
    // Present only when known, and before data so it reads near the top of the body.
    ...(scope.accountId === undefined ? {} : { accountId: scope.accountId }),
    data,
  };
}

/**
 * The bytes that are signed and sent. Serialise once when the event is queued
 * and store the text: every retry must carry the identical body, and any
 * re-serialisation could reorder members and change the signature.
 */
export function serializeEvent(event: WebhookEvent): string {
  return JSON.stringify(event);
}
