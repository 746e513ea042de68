import { ScalarType, getOption, hasOption, type DescField, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { validate } from "../../gen/fraud/v1/options_pb.js";
import { hasLoneSurrogate } from "../code-points.js";
import { boundsProblem, pathOf, type Violation } from "./validation.js";

/**
 * Checks that a REST JSON body has the JSON types its request message expects,
 * so a client that sends `"userId": 42` or `"device": [1]` is told which field
 * is wrong (the protobuf decoder alone would only name the message type).
 */
export function jsonShapeViolations(desc: DescMessage, json: Record<string, JsonValue>): Violation[] {
  const out: Violation[] = [];
  checkObject(desc, json, "", out);
  return out;
}

/** Each message's fields by the names JSON may use for them (jsonName and the proto name); json-decode.ts shares it. */
const fieldsByJsonKey = new WeakMap<DescMessage, Map<string, DescField>>();

export function fieldsByJsonName(desc: DescMessage): ReadonlyMap<string, DescField> {
  let fields = fieldsByJsonKey.get(desc);
  if (fields === undefined) {
    fields = new Map();
    // The proto name first, so that a jsonName equal to another field's proto name wins, as find() on jsonName first did.
    for (const field of desc.fields) fields.set(field.name, field);
    for (const field of desc.fields) fields.set(field.jsonName, field);
    fieldsByJsonKey.set(desc, fields);
  }
  return fields;
}

/**
 * A field's JSON path travels as its parent's prefix ("device."), its own
 * name ("languages") and, for a list item, its index, joined (pathOf) only
 * when something is wrong with it: every request body goes through here, and
 * nearly all of them are right.
 */
function checkObject(desc: DescMessage, json: Record<string, JsonValue>, prefix: string, out: Violation[]): void {
  const fields = fieldsByJsonName(desc);
  for (const key in json) {
    const field = fields.get(key);
    if (!field) {
      out.push({ field: prefix + key, description: `is not a field of ${desc.name}` });
      continue;
    }
    const value = json[key] as JsonValue;
    if (value === null) continue; // null means "not set" in protobuf JSON
    checkField(field, value, prefix, key, out);
  }
}

function checkField(field: DescField, value: JsonValue, prefix: string, name: string, out: Violation[]): void {
  switch (field.fieldKind) {
    case "list":
      if (!Array.isArray(value)) {
        out.push({ field: prefix + name, description: "must be an array" });
        return;
      }
      for (let i = 0; i < value.length; i++) {
        if (field.listKind === "message") checkMessage(field.message, value[i] as JsonValue, prefix, name, i, out);
        else if (field.listKind === "scalar") checkScalar(field.scalar, value[i] as JsonValue, prefix, name, i, out);
      }
      return;
    case "map":
      if (typeof value !== "object" || Array.isArray(value)) out.push({ field: prefix + name, description: "must be an object" });
      return;
    case "message":
      checkMessage(field.message, value, prefix, name, -1, out);
      return;
    case "scalar":
      checkScalar(field.scalar, value, prefix, name, -1, out, field);
      return;
    case "enum":
      if (typeof value !== "string" && typeof value !== "number") out.push({ field: prefix + name, description: "must be a string" });
      return;
  }
}

/** `index` is a list item's, or -1 (validation.ts's pathOf). */
function checkMessage(desc: DescMessage, value: JsonValue, prefix: string, name: string, index: number, out: Violation[]): void {
  if (desc.typeName === "google.protobuf.Value") return; // any JSON value
  if (desc.typeName === "google.protobuf.Timestamp") {
    if (typeof value !== "string" || !isTimestamp(value)) {
      out.push({ field: pathOf(prefix, name, index), description: "must be an RFC 3339 timestamp such as 2026-01-02T03:04:05Z" });
    }
    return;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    out.push({ field: pathOf(prefix, name, index), description: "must be an object" });
    return;
  }
  if (desc.typeName.startsWith("google.protobuf.")) return; // Struct and friends: any object
  checkObject(desc, value, `${pathOf(prefix, name, index)}.`, out);
}

/** `field`, for a singular field: its own bounds name what a number past its type's range breaks. */
function checkScalar(scalar: ScalarType, value: JsonValue, prefix: string, name: string, index: number, out: Violation[], field?: DescField): void {
  switch (scalar) {
    case ScalarType.STRING:
      if (typeof value !== "string") out.push({ field: pathOf(prefix, name, index), description: "must be a string" });
      // JSON's \ud800 escape can write one; protobuf strings are UTF-8, which cannot.
      else if (hasLoneSurrogate(value)) out.push({ field: pathOf(prefix, name, index), description: "must be valid Unicode text: it holds a lone UTF-16 surrogate" });
      return;
    case ScalarType.BYTES:
      if (typeof value !== "string") out.push({ field: pathOf(prefix, name, index), description: "must be a string" });
      return;
    case ScalarType.BOOL:
      if (typeof value !== "boolean") out.push({ field: pathOf(prefix, name, index), description: "must be true or false" });
      return;
    default: {
      // A number is a JSON number. Protobuf JSON also takes numbers as strings, but the REST API holds to its
      // documented types; only 64-bit integers may be strings, as protobuf JSON writes them (a double cannot hold them all).
      const numeric =
        typeof value === "number" || (SIXTY_FOUR_BIT.has(scalar) && typeof value === "string" && value.trim() !== "" && Number.isFinite(Number(value)));
      if (!numeric) {
        out.push({ field: pathOf(prefix, name, index), description: "must be a number" });
        return;
      }
      // A JSON number too large for a double (1e400) parses as Infinity.
      if (!Number.isFinite(Number(value))) {
        out.push({ field: pathOf(prefix, name, index), description: "must be a finite number" });
        return;
      }
      const range = INTEGER_RANGES.get(scalar);
      if (range === undefined) return;
      if (!Number.isInteger(Number(value))) {
        out.push({ field: pathOf(prefix, name, index), description: "must be a whole number" });
        return;
      }
      if (!withinRange(value, scalar, range)) out.push({ field: pathOf(prefix, name, index), description: outOfRange(Number(value), range, field) });
    }
  }
}

/**
 * Why a whole number past its type's range is refused: by the field's own bounds when it breaks them
 * (`limit` past 100 says so, whether it is 101 or 2^31), else by the range the field takes, its own
 * bounds within its type's (`offset`, at least 0: between 0 and 2147483647).
 */
function outOfRange(value: number, [min, max]: readonly [bigint, bigint], field: DescField | undefined): string {
  const rules = field && hasOption(field, validate) ? getOption(field, validate) : undefined;
  const broken = rules && boundsProblem(rules, value);
  if (broken) return broken;
  const lower = rules?.min !== undefined && BigInt(Math.ceil(rules.min)) > min ? BigInt(Math.ceil(rules.min)) : min;
  const upper = rules?.max !== undefined && BigInt(Math.floor(rules.max)) < max ? BigInt(Math.floor(rules.max)) : max;
  return `must be between ${lower} and ${upper}`;
}

/** The 64-bit integer types, which protobuf JSON writes as strings (a double cannot hold them all). */
export const SIXTY_FOUR_BIT: ReadonlySet<ScalarType> = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);

const MAX_EXACT = BigInt(Number.MAX_SAFE_INTEGER);

/** A whole number (JSON number or numeric string) against an integer type's range. */
function withinRange(value: number | string, scalar: ScalarType, [min, max]: readonly [bigint, bigint]): boolean {
  // 32-bit ranges compare as numbers; 64-bit ones need BigInt, past a double's exact integers.
  const exact = EXACT_INTEGER_RANGES.get(scalar);
  if (typeof value === "number" && exact) return value >= exact[0] && value <= exact[1];
  const whole = typeof value === "string" && /^\s*-?\d+\s*$/.test(value) ? BigInt(value.trim()) : BigInt(Number(value));
  return whole >= min && whole <= max;
}
const INT32: [bigint, bigint] = [-(2n ** 31n), 2n ** 31n - 1n];
const UINT32: [bigint, bigint] = [0n, 2n ** 32n - 1n];
const INT64: [bigint, bigint] = [-(2n ** 63n), 2n ** 63n - 1n];
const UINT64: [bigint, bigint] = [0n, 2n ** 64n - 1n];
/** What each integer type can hold: a value outside is refused by name here rather than by the decoder. */
const INTEGER_RANGES: ReadonlyMap<ScalarType, readonly [bigint, bigint]> = new Map<ScalarType, [bigint, bigint]>([
  [ScalarType.INT32, INT32],
  [ScalarType.SINT32, INT32],
  [ScalarType.SFIXED32, INT32],
  [ScalarType.UINT32, UINT32],
  [ScalarType.FIXED32, UINT32],
  [ScalarType.INT64, INT64],
  [ScalarType.SINT64, INT64],
  [ScalarType.SFIXED64, INT64],
  [ScalarType.UINT64, UINT64],
  [ScalarType.FIXED64, UINT64],
]);

/**
 * The types whose whole range a JSON number holds exactly (the 32-bit ones),
 * with that range as numbers: json-decode.ts takes their JSON numbers as they
 * are and leaves the 64-bit types to protobuf-es.
 */
export const EXACT_INTEGER_RANGES: ReadonlyMap<ScalarType, readonly [number, number]> = new Map(
  [...INTEGER_RANGES].filter(([, [, max]]) => max <= MAX_EXACT).map(([scalar, [min, max]]) => [scalar, [Number(min), Number(max)] as const]),
);

/** The instants a protobuf Timestamp can hold: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z. */
const EARLIEST_TIMESTAMP_MS = Date.parse("0001-01-01T00:00:00Z");
const LATEST_TIMESTAMP_MS = Date.parse("9999-12-31T23:59:59.999Z");

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:Z|[+-](\d{2}):(\d{2}))$/;

/**
 * RFC 3339 as protobuf JSON writes it (upper-case T and Z), for an instant a Timestamp can hold, on a day
 * the calendar has: Date.parse rolls 2030-02-30 over to March 2 and hour 24 to the next day, which would
 * store another instant than the one written.
 */
function isTimestamp(text: string): boolean {
  const parts = RFC3339.exec(text);
  if (parts === null) return false;
  // Every group holds digits, but the offset's, which are absent after Z.
  const group = (index: number) => Number(parts[index] ?? 0);
  const [month, day] = [group(2), group(3)];
  if (month < 1 || month > 12 || day < 1) return false;
  // Day 0 of the next month is the last day of this one (setUTCFullYear, since years 1 to 99 mean 19xx to Date.UTC).
  const lastDay = new Date(0);
  lastDay.setUTCFullYear(group(1), month, 0);
  if (day > lastDay.getUTCDate() || group(4) > 23 || group(5) > 59 || group(6) > 59 || group(7) > 23 || group(8) > 59) return false;
  const ms = Date.parse(text);
  return ms >= EARLIEST_TIMESTAMP_MS && ms <= LATEST_TIMESTAMP_MS;
}
