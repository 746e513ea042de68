import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { validateMessage } from "../src/api/validation.js";
import { DecideRequestSchema } from "../gen/fraud/v1/decision_pb.js";

describe("validateMessage", () => {
  it("names each violation by its JSON path: nested messages, list items and values inside a Struct", () => {
    const message = create(DecideRequestSchema, {
      userId: "",
      action: "login",
      device: { languages: ["en", "x".repeat(40)], screen: { pixelRatio: -1 } },
      metadata: { plan: "pro", tags: ["ok", ["y".repeat(1_100)]], limits: { daily: Number.NaN } },
    });
    expect(validateMessage(DecideRequestSchema, message)).toEqual([
      { field: "userId", description: "is required" },
      { field: "device.languages[1]", description: "must be at most 32 characters" },
      { field: "device.screen.pixelRatio", description: "must be at least 0" },
      { field: "metadata.tags[1][0]", description: "must be at most 1024 characters" },
      { field: "metadata.limits.daily", description: "must be a finite number" },
    ]);
  });

  it("finds nothing wrong with a valid request", () => {
    const message = create(DecideRequestSchema, {
      userId: "user-1",
      action: "checkout",
      amount: 10,
      currency: "EUR",
      device: { languages: ["en-GB", "fr"], screen: { pixelRatio: 2 } },
      metadata: { tags: ["a", ["b"]], nested: { n: 1 } },
    });
    expect(validateMessage(DecideRequestSchema, message)).toEqual([]);
  });
});
