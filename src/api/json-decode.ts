import { create, ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { hasLoneSurrogate } from "../code-points.js";
import { EXACT_INTEGER_RANGES, fieldsByJsonName } from "./json-shape.js";

/**
 * Protobuf JSON to a message for the plain request bodies nearly every call
 * sends: strings, booleans, 32-bit integers and doubles as JSON numbers,
 * nested messages, lists of those, and google.protobuf.Struct objects.
 * protobuf-es's `fromJson` decodes through its reflection API, which cost
 * about a tenth of the request thread's time under analyze load
 * (docs/benchmarks.md).
 *
 * Anything else (enums, 64-bit integers, bytes, floats, numbers written as
 * strings, maps, oneofs, other well-known types, a field given twice under
 * its two names, strings with a lone surrogate, non-finite numbers, a
 * "__proto__" key inside a Struct) answers `undefined`, and the caller
 * decodes with `fromJson`, so that the result is what `fromJson` gives,
 * error or message; test/json-decode.test.ts compares the two. Bodies reach
 * here after the JSON shape check.
 */
export function decodePlainJson<Desc extends DescMessage>(schema: Desc, json: JsonObject): MessageShape<Desc> | undefined {
  return decodeMessage(schema, json) as MessageShape<Desc> | undefined;
}

function decodeMessage(schema: DescMessage, json: JsonObject): Record<string, unknown> | undefined {
  const message = create(schema) as Record<string, unknown>;
  const fields = fieldsByJsonName(schema);
  for (const key in json) {
    const field = fields.get(key);
    if (field === undefined) continue; // unknown fields are ignored, as the gateway asks fromJson to
    if (field.oneof !== undefined) return undefined;
    // The same field under both its names: fromJson refuses it ("set multiple times").
    const otherName = key === field.jsonName ? field.name : field.jsonName;
    if (otherName !== key && Object.hasOwn(json, otherName)) return undefined;
    const value = json[key] as JsonValue;
    if (value === null) {
      // A google.protobuf.Value field takes null as a value (NullValue), not as "not set".
      if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.Value") return undefined;
      continue; // not set: create() already holds what fromJson would leave
    }
    const decoded = decodeField(field, value);
    if (decoded === undefined) return undefined;
    message[field.localName] = decoded;
  }
  return message;
}

function decodeField(field: DescField, value: JsonValue): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return plainScalar(field.scalar, value);
    case "message":
      return decodeMessageValue(field.message, value);
    case "list": {
      if (!Array.isArray(value)) return undefined;
      const items: unknown[] = [];
      for (const item of value) {
        const decoded =
          field.listKind === "scalar" ? plainScalar(field.scalar, item) : field.listKind === "message" && item !== null ? decodeMessageValue(field.message, item) : undefined;
        if (decoded === undefined) return undefined;
        items.push(decoded);
      }
      return items;
    }
    default:
      return undefined;
  }
}

function decodeMessageValue(schema: DescMessage, value: JsonValue): unknown {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  // protobuf-es holds a Struct field as the JSON object itself; JSON.parse made this one, nothing else shares it.
  if (schema.typeName === "google.protobuf.Struct") return plainStruct(value) ? value : undefined;
  if (schema.typeName.startsWith("google.protobuf.")) return undefined;
  return decodeMessage(schema, value);
}

/**
 * Whether fromJson would keep the object as it is: its strings well formed,
 * its numbers finite, and no "__proto__" key anywhere (JSON.parse makes it an own key; fromJson's
 * assignment hits the prototype setter instead and drops it).
 */
function plainStruct(value: JsonValue): boolean {
  if (typeof value === "string") return !hasLoneSurrogate(value);
  if (typeof value === "number") return Number.isFinite(value);
  if (typeof value !== "object" || value === null) return true;
  if (Array.isArray(value)) return value.every(plainStruct);
  if (Object.hasOwn(value, "__proto__")) return false;
  for (const key in value) if (hasLoneSurrogate(key) || !plainStruct(value[key] as JsonValue)) return false;
  return true;
}

/** A scalar in its plain JSON form, or undefined for any other form (which fromJson decides on). */
function plainScalar(scalar: ScalarType, value: JsonValue): string | number | boolean | undefined {
  switch (scalar) {
    case ScalarType.STRING:
      // A lone surrogate: fromJson refuses it as invalid UTF-8.
      return typeof value === "string" && !hasLoneSurrogate(value) ? value : undefined;
    case ScalarType.BOOL:
      return typeof value === "boolean" ? value : undefined;
    case ScalarType.DOUBLE:
      // JSON.parse reads 1e400 as Infinity, which fromJson refuses.
      return typeof value === "number" && Number.isFinite(value) ? value : undefined;
    default: {
      // 32-bit integers; the 64-bit ones (bigint), floats and bytes are fromJson's.
      const range = EXACT_INTEGER_RANGES.get(scalar);
      return range && typeof value === "number" && Number.isInteger(value) && value >= range[0] && value <= range[1] ? value : undefined;
    }
  }
}
