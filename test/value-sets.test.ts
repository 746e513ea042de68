import { describe, expect, it } from "vitest";
import { createRegistry, getOption } from "@bufbuild/protobuf";
import { string_value } from "../gen/fraud/v1/options_pb.js";
import { file_fraud_v1_value_sets } from "../gen/fraud/v1/value_sets_pb.js";
import { allowedTransitions, type CaseStatus } from "../src/cases/lifecycle.js";
import { POLICY_STATUSES } from "../src/policies/index.js";
import { EVENT_TYPES } from "../src/webhooks/events.js";

const registry = createRegistry(file_fraud_v1_value_sets);
function strings(name: string): string[] {
  const set = registry.getEnum(name);
  if (!set) throw new Error(`no value set ${name}`);
  return set.values.slice(1).map((value) => getOption(value, string_value));
}

describe("value sets declared once in the contract", () => {
  it("match the code's event types, policy statuses and case statuses", () => {
    expect(strings("fraud.v1.EventType")).toEqual([...EVENT_TYPES]);
    expect(strings("fraud.v1.PolicyStatus")).toEqual([...POLICY_STATUSES]);
    const caseStatuses = strings("fraud.v1.CaseStatus") as CaseStatus[];
    expect(caseStatuses).toEqual(["open", "investigating", "escalated", "resolved", "dismissed"]);
    for (const status of caseStatuses) expect(allowedTransitions(status).length).toBeGreaterThan(0);
    expect(strings("fraud.v1.Action")).toEqual(["login", "signup", "trial_start", "checkout", "purchase", "transfer", "password_change", "custom"]);
  });
});
