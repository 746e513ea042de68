import type { JsonObject } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { validateMessage } from "../src/api/validation.js";
import { DecideRequestSchema } from "../gen/fraud/v1/decision_pb.js";
import { AddListEntriesRequestSchema } from "../gen/fraud/v1/list_pb.js";
import { UpdateCaseRequestSchema } from "../gen/fraud/v1/case_pb.js";
import { CreateWebhookRequestSchema, UpdateWebhookRequestSchema } from "../gen/fraud/v1/webhook_pb.js";

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

  it("bounds the keys of metadata objects, naming the object that holds the long one", () => {
    const message = create(DecideRequestSchema, { userId: "u", action: "login", metadata: { cart: { ["k".repeat(1_025)]: 1, ["k".repeat(1_024)]: 2 } } });
    expect(validateMessage(DecideRequestSchema, message)).toEqual([{ field: "metadata.cart", description: "has a key longer than 1024 characters" }]);
  });

  it("refuses a lone UTF-16 surrogate in metadata's strings and keys, which JSON can write and UTF-8 cannot", () => {
    const message = create(DecideRequestSchema, { userId: "u", action: "login", metadata: { a: "\ud800", cart: { "\udc00k": 1 }, ok: "pair \ud83d\ude00" } });
    expect(validateMessage(DecideRequestSchema, message)).toEqual([
      { field: "metadata.a", description: "must be valid Unicode text: it holds a lone UTF-16 surrogate" },
      { field: "metadata.cart", description: "has a key that is not valid Unicode text: it holds a lone UTF-16 surrogate" },
    ]);
  });

  it("refuses timestamps that RFC 3339 cannot write, which binary protobuf can carry", () => {
    const entries = [
      { value: "a", expiresAt: { seconds: 253_402_300_799n, nanos: 999_999_999 } },
      { value: "b", expiresAt: { seconds: 253_402_300_800n } },
      { value: "c", expiresAt: { seconds: 9_223_372_036_854_775_807n } },
      { value: "d", expiresAt: { seconds: -62_135_596_801n } },
      { value: "e", expiresAt: { seconds: 1n, nanos: -1 } },
      { value: "f" },
    ];
    const message = create(AddListEntriesRequestSchema, { name: "blocked", entries });
    const wanted = "must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z";
    expect(validateMessage(AddListEntriesRequestSchema, message)).toEqual(
      [1, 2, 3, 4].map((i) => ({ field: `entries[${i}].expiresAt`, description: wanted })),
    );
  });

  it("takes an empty string sent for an optional field with allowed values, or in a list, as a value to check", () => {
    expect(validateMessage(UpdateWebhookRequestSchema, create(UpdateWebhookRequestSchema, { id: "whe_1", status: "" }))).toEqual([{ field: "status", description: "must not be empty" }]);
    expect(validateMessage(UpdateCaseRequestSchema, create(UpdateCaseRequestSchema, { id: "case_1", status: "" }))).toEqual([{ field: "status", description: "must not be empty" }]);
    expect(validateMessage(CreateWebhookRequestSchema, create(CreateWebhookRequestSchema, { url: "https://hooks.example.com/", events: ["decision.deny", ""] }))).toEqual([
      { field: "events[1]", description: "must not be empty" },
    ]);
    // Left out, they are simply not set.
    expect(validateMessage(UpdateCaseRequestSchema, create(UpdateCaseRequestSchema, { id: "case_1" }))).toEqual([]);
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

  it("refuses metadata nested past 30 levels, as a REST body's 32 levels would, whatever the protocol", () => {
    const nested = (levels: number): JsonObject => {
      let value: JsonObject = { leaf: true };
      for (let i = 1; i < levels; i++) value = { a: value };
      return value;
    };
    const problems = (levels: number) => validateMessage(DecideRequestSchema, create(DecideRequestSchema, { userId: "u", action: "login", metadata: { m: nested(levels) } }));
    // metadata (depth 0) holds "m" (1) and its chain.
    expect(problems(30)).toEqual([]);
    const refused = problems(31);
    expect(refused).toHaveLength(1);
    expect(refused[0]?.description).toBe("is nested deeper than 30 levels");
    expect(refused[0]?.field).toMatch(/^metadata\.m(\.a)+$/);
  });

  it("takes ISO 4217 currency codes only", () => {
    const problems = (currency: string) => validateMessage(DecideRequestSchema, create(DecideRequestSchema, { userId: "u", action: "checkout", amount: 10, currency }));
    for (const currency of ["EUR", "USD", "JPY", "CHF", "VED", "XAU", "XTS"]) expect(problems(currency), currency).toEqual([]);
    expect(problems("ZZZ")).toEqual([{ field: "currency", description: "is not an ISO 4217 currency code" }]);
    expect(problems("eur")).toEqual([{ field: "currency", description: "must be an ISO 4217 code of three upper-case letters" }]);
  });
});
