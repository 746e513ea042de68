import { describe, expect, it } from "vitest";
import { allowedTransitions, canTransition, priorityFromScore, type CaseStatus } from "../src/cases/lifecycle.js";

describe("case lifecycle (docs/cases.md)", () => {
  it("bands priority by score", () => {
    expect([80, 84, 85, 89, 90, 94, 95, 100].map(priorityFromScore)).toEqual(["low", "low", "medium", "medium", "high", "high", "critical", "critical"]);
  });

  it("allows exactly the documented transitions", () => {
    const statuses: CaseStatus[] = ["open", "investigating", "escalated", "resolved", "dismissed"];
    const documented: Record<CaseStatus, CaseStatus[]> = {
      open: ["investigating", "escalated", "resolved", "dismissed"],
      investigating: ["escalated", "resolved", "dismissed", "open"],
      escalated: ["investigating", "resolved", "dismissed"],
      resolved: ["open"],
      dismissed: ["open"],
    };
    for (const from of statuses) {
      expect([...allowedTransitions(from)].sort()).toEqual([...documented[from]].sort());
      for (const to of statuses) expect(canTransition(from, to), `${from} → ${to}`).toBe(documented[from].includes(to));
    }
  });
});
