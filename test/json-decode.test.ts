import { equals, fromJson, toBinary, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { decodePlainJson } from "../src/api/json-decode.js";
import { API_SERVICES } from "../src/api/contract.js";
import { DecideRequestSchema, AnalyzeRequestSchema } from "../gen/fraud/v1/decision_pb.js";
import { benchRequests, toAnalyzeRequest } from "../bench/inputs.js";
import { HUMAN_DESKTOP, botAttack } from "./helpers/inputs.js";
import { seededRandom } from "./helpers/random.js";

/** What the gateway does: the plain decoder, else protobuf-es. */
function gatewayDecode(schema: DescMessage, json: JsonObject) {
  return decodePlainJson(schema, json) ?? fromJson(schema, json, { ignoreUnknownFields: true });
}

type Outcome = { ok: true; message: ReturnType<typeof fromJson> } | { ok: false; error: string };

function attempt(decode: () => ReturnType<typeof fromJson>): Outcome {
  try {
    return { ok: true, message: decode() };
  } catch (error) {
    return { ok: false, error: String(error) };
  }
}

/** Both decoders agree: the same message (field by field, and on the wire), or both refuse. */
function expectSameAsFromJson(schema: DescMessage, json: JsonObject): void {
  const reference = attempt(() => fromJson(schema, structuredClone(json), { ignoreUnknownFields: true }));
  const ours = attempt(() => gatewayDecode(schema, structuredClone(json)));
  expect(ours.ok, JSON.stringify(json)).toBe(reference.ok);
  if (ours.ok && reference.ok) {
    expect(equals(schema, ours.message, reference.message), JSON.stringify(json)).toBe(true);
    expect(ours.message).toEqual(reference.message);
    expect(toBinary(schema, ours.message)).toEqual(toBinary(schema, reference.message));
  } else if (!ours.ok && !reference.ok) {
    expect(ours.error).toBe(reference.error);
  }
}

/** Plain values and the awkward ones fromJson has rules for. */
const ODD_VALUES: JsonValue[] = [
  null, "", "x", "42", "-7", "1.5", "1e3", " 3", "NaN", "Infinity", 0, -0, 1, -1, 1.5, 2 ** 31, 2 ** 32, -(2 ** 31) - 1, 1e300,
  // JSON.parse reads 1e400 as Infinity; lone surrogates are not UTF-8; a pair is.
  Number.POSITIVE_INFINITY, "\ud800", "a\udc00b", "a😀",
  true, false, [], {}, ["a"], [1, null], { a: 1 }, "AAEC", "2026-01-02T03:04:05Z",
];

function valueFor(field: DescField, next: () => number, depth: number): JsonValue {
  const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)] as T;
  if (next() < 0.3) return pick(ODD_VALUES);
  switch (field.fieldKind) {
    case "scalar":
      return pick(["user-1", 0, 3, 7.25, true, -5, 4_000_000_000]);
    case "enum":
      return pick([...field.enum.values.map((v) => v.name), 0, 1]);
    case "message":
      return depth > 3 ? {} : bodyFor(field.message, next, depth + 1);
    case "list":
      return Array.from({ length: Math.floor(next() * 3) }, () =>
        field.listKind === "message" ? (depth > 3 ? {} : bodyFor(field.message, next, depth + 1)) : field.listKind === "enum" ? pick(field.enum.values.map((v) => v.name)) : pick(["a", 1, 2.5, true]),
      );
    case "map":
      return { k: pick(["v", 1, true]) };
  }
}

function bodyFor(schema: DescMessage, next: () => number, depth = 0): JsonObject {
  const body: JsonObject = {};
  if (schema.typeName === "google.protobuf.Struct") return { a: 1, b: [null, "x", { c: false }] };
  for (const field of schema.fields) {
    const roll = next();
    if (roll < 0.4) continue;
    // Now and then under the proto name, and now and then under both names.
    const key = roll < 0.5 ? field.name : field.jsonName;
    body[key] = valueFor(field, next, depth);
    if (roll > 0.98 && field.name !== field.jsonName) body[field.name] = valueFor(field, next, depth);
  }
  if (next() < 0.05) body.notAField = 1;
  return body;
}

describe("decodePlainJson", () => {
  it("decodes every benchmark body and the test personas itself, as fromJson would", () => {
    const bodies = benchRequests().map((named) => named.request as unknown as JsonObject);
    for (const body of bodies) {
      expect(decodePlainJson(DecideRequestSchema, body)).toBeDefined();
      expectSameAsFromJson(DecideRequestSchema, body);
      const analyze = toAnalyzeRequest(named(body)) as unknown as JsonObject;
      expect(decodePlainJson(AnalyzeRequestSchema, analyze)).toBeDefined();
      expectSameAsFromJson(AnalyzeRequestSchema, analyze);
    }
    for (const persona of [{ userId: "u1", action: "login", ...HUMAN_DESKTOP }, { userId: "u2", action: "signup", ...botAttack("185.220.101.1") }]) {
      const body = JSON.parse(JSON.stringify(persona)) as JsonObject;
      expect(decodePlainJson(DecideRequestSchema, body)).toBeDefined();
      expectSameAsFromJson(DecideRequestSchema, body);
    }
  });

  it("leaves what it does not decode plainly to fromJson, with the same result or the same error", () => {
    const cases: JsonObject[] = [
      { userId: "a", user_id: "b" },
      { userId: "a", amount: "12.5" },
      { userId: "a", amount: null, email: null, device: null },
      { device: { hardwareConcurrency: -1 } },
      { device: { hardwareConcurrency: 1.5 } },
      { device: { languages: ["en", null] } },
      { device: { screen: { width: 2 ** 32 } } },
      { device: { screen: { width: -0 } } },
      { metadata: { nested: { deeper: [1, "two", null] } } },
      { metadata: [] },
      { userId: "\ud800", action: "login" },
      { device: { languages: ["en", "\udc00"] } },
      { userId: "emoji 😀", metadata: { note: "😀" } },
      { amount: Number.POSITIVE_INFINITY },
      { metadata: { big: Number.POSITIVE_INFINITY } },
      { metadata: { "\ud800": 1 } },
      { metadata: { list: ["ok", "\udfff"] } },
    ];
    for (const body of cases) expectSameAsFromJson(DecideRequestSchema, body);
    expect(decodePlainJson(DecideRequestSchema, { userId: "a", user_id: "b" })).toBeUndefined();
    expect(decodePlainJson(DecideRequestSchema, { amount: "12.5" })).toBeUndefined();
    expect(decodePlainJson(DecideRequestSchema, { userId: "\ud800" })).toBeUndefined();
  });

  it("leaves a Struct holding a __proto__ key to fromJson, which drops the key rather than keep it", () => {
    // JSON.parse makes "__proto__" an own key; only a body parsed from text has one.
    const text = '{"userId":"u","metadata":{"a":1,"__proto__":{"isAdmin":true},"n":{"__proto__":{"x":1}}}}';
    expect(decodePlainJson(DecideRequestSchema, JSON.parse(text) as JsonObject)).toBeUndefined();
    const decoded = gatewayDecode(DecideRequestSchema, JSON.parse(text) as JsonObject) as { metadata?: JsonObject };
    expect(decoded).toEqual(fromJson(DecideRequestSchema, JSON.parse(text) as JsonObject, { ignoreUnknownFields: true }));
    expect(Object.keys(decoded.metadata ?? {})).not.toContain("__proto__");
  });

  it("agrees with fromJson on random bodies for every REST operation's request", () => {
    const next = seededRandom(20261121);
    for (const service of API_SERVICES) {
      for (const method of service.methods) {
        for (let i = 0; i < 150; i++) expectSameAsFromJson(method.input, bodyFor(method.input, next));
      }
    }
  });
});

function named(body: JsonObject) {
  return body as unknown as Parameters<typeof toAnalyzeRequest>[0];
}
