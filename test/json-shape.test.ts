import { describe, expect, it } from "vitest";
import { AuditLogEntrySchema } from "../gen/fraud/v1/audit_pb.js";
import { DecideRequestSchema } from "../gen/fraud/v1/decision_pb.js";
import { jsonShapeViolations } from "../src/api/json-shape.js";

describe("REST JSON shape check", () => {
  it("wants JSON numbers for numeric fields, naming each field sent as a string", () => {
    expect(jsonShapeViolations(DecideRequestSchema, { userId: "u", action: "checkout", amount: "5", behavior: { clicks: "3" } })).toEqual([
      { field: "amount", description: "must be a number" },
      { field: "behavior.clicks", description: "must be a number" },
    ]);
    expect(jsonShapeViolations(DecideRequestSchema, { userId: "u", action: "checkout", amount: 5, behavior: { clicks: 3 } })).toEqual([]);
  });

  it("takes 64-bit integers as strings too, as protobuf JSON writes them", () => {
    expect(jsonShapeViolations(AuditLogEntrySchema, { seq: "9007199254740993" })).toEqual([]);
    expect(jsonShapeViolations(AuditLogEntrySchema, { seq: 12 })).toEqual([]);
    expect(jsonShapeViolations(AuditLogEntrySchema, { seq: "twelve" })).toEqual([{ field: "seq", description: "must be a number" }]);
  });
});
