import { describe, expect, it } from "vitest";
import { buildEvent, decisionEventType, EVENT_TYPES, serializeEvent } from "../../src/webhooks/events.js";
import type { DecisionEventData, WebhookEvent } from "../../src/webhooks/events.js";
import { signPayload, verifyWebhookSignature } from "../../src/webhooks/signature.js";
import { ManualClock } from "../helpers/clock.js";

const decision: DecisionEventData = {
  decisionId: "dec_1",
  requestId: "req_1",
  evidenceId: "evi_1",
  userId: "user_1",
  action: "checkout",
  decision: "deny",
  score: 91,
  confidence: 0.87,
  reasons: ["TOR_EXIT"],
  shadowResults: [{ policyId: "pol_1", policyName: "Strict checkout", decision: "deny", matchedRules: [0] }],
};

describe("event envelope", () => {
  it("lists the eight event types of the specification", () => {
    expect(EVENT_TYPES).toEqual([
      "decision.allow",
      "decision.challenge",
      "decision.deny",
      "case.created",
      "case.resolved",
      "policy.triggered",
      "feedback.received",
      "anomaly.detected",
    ]);
    expect(decisionEventType("challenge")).toBe("decision.challenge");
  });

  it("carries id, type, creation time, scope and data in that order", () => {
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0, 123));
    const event = buildEvent("decision.deny", decision, { environment: "live", accountId: "acct_1" }, clock);
    expect(event.id).toMatch(/^evt_[0-9A-Za-z]{22}$/);
    expect(Object.keys(event)).toEqual(["id", "type", "createdAt", "environment", "accountId", "data"]);
    expect(event).toMatchObject({ type: "decision.deny", createdAt: "2026-11-21T12:00:00.123Z", environment: "live", data: decision });
    expect(buildEvent("decision.deny", decision, { environment: "live" }, clock).id).not.toBe(event.id);
  });

  it("leaves accountId out of installation-wide events", () => {
    const event = buildEvent(
      "anomaly.detected",
      {
        anomalyId: "anom_1",
        kind: "deny_rate_spike",
        severity: "high",
        description: "deny rate 5x its hourly baseline",
        metrics: { observed: 0.5, baseline: 0.1 },
        windowStart: "2026-11-21T11:00:00.000Z",
        windowEnd: "2026-11-21T12:00:00.000Z",
      },
      { environment: "test" },
      new ManualClock(),
    );
    expect("accountId" in event).toBe(false);
  });

  it("serialises to the body that is signed, and parses back to the same event", () => {
    const event = buildEvent("decision.deny", decision, { environment: "live", accountId: "acct_1" }, new ManualClock());
    const body = serializeEvent(event);
    expect(JSON.parse(body) as WebhookEvent).toEqual(event);
    const secret = "whsec_abcdefghijklmnopqrstuvwxyz012345";
    const now = Date.parse(event.createdAt);
    expect(
      verifyWebhookSignature({ payload: body, signature: signPayload(body, secret), timestamp: String(now / 1000), secret }, now),
    ).toEqual({ valid: true, reason: "valid" });
  });
});
