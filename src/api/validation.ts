import { isIP } from "node:net";
import { ScalarType, createRegistry, getOption, hasOption, type DescField, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, type Timestamp } from "@bufbuild/protobuf/wkt";
import { StringFormat, message_rules, string_value, validate, type FieldRules } from "../../gen/fraud/v1/options_pb.js";
import { file_fraud_v1_value_sets } from "../../gen/fraud/v1/value_sets_pb.js";
import type { FieldViolation } from "../../gen/fraud/v1/errors_pb.js";
import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "./errors.js";
import { codePoints, hasLoneSurrogate } from "../code-points.js";

/**
 * Input validation driven by the `(fraud.v1.validate)` and
 * `(fraud.v1.message_rules)` options in the .proto files. Each message type is
 * compiled once into a list of checks; every protocol runs the same checks
 * through one interceptor, so no handler re-checks its input by hand.
 */
export type Violation = Pick<FieldViolation, "field" | "description">;

type Fields = Record<string, unknown>;
/**
 * A compiled check of one message. `prefix` is the JSON path of the message
 * ("device.", or "" for the body); a field's own path is joined to it only
 * when the field breaks a rule, since every request comes through here and
 * nearly all of them break none.
 */
type Check = (message: Fields, prefix: string, out: Violation[]) => void;

/** A list item's path, or the field's own when `index` is -1 (the JSON shape check names its fields the same way). */
export function pathOf(prefix: string, name: string, index: number): string {
  return index < 0 ? prefix + name : `${prefix}${name}[${index}]`;
}

/** What a number breaks of a field's `min` and `max` rules, if anything (a field's min is never past its max). */
export function boundsProblem(rules: Pick<FieldRules, "min" | "max">, value: number): string | undefined {
  if (rules.min !== undefined && value < rules.min) return `must be at least ${rules.min}`;
  if (rules.max !== undefined && value > rules.max) return `must be at most ${rules.max}`;
  return undefined;
}

const compiled = new WeakMap<DescMessage, Check[]>();

/** The 400 for a request that breaks the contract's rules or shape, naming every violation. */
export function invalidRequest(violations: readonly Violation[]): ConnectError {
  const summary = violations.map((v) => `${v.field} ${v.description}`).join("; ");
  return apiError("VALIDATION_ERROR", `invalid request: ${summary}`, { fieldViolations: [...violations] });
}

/** Returns every rule the message breaks; empty when it is valid. */
export function validateMessage(desc: DescMessage, message: object): Violation[] {
  const out: Violation[] = [];
  runChecks(desc, message as Fields, "", out);
  return out;
}

/**
 * What a value breaks of one field's rules, described as {@link validateMessage} describes it: for a value that
 * comes in other than as a request (fraudctl's arguments), held to the contract's rules all the same.
 */
export function fieldProblems(field: DescField, value: string): string[] {
  const out: Violation[] = [];
  compileFieldRules(field, getOption(field, validate))({ [field.localName]: value }, "", out);
  return out.map((violation) => violation.description);
}

function runChecks(desc: DescMessage, message: Fields, prefix: string, out: Violation[]): void {
  for (const check of checksFor(desc)) check(message, prefix, out);
}

function checksFor(desc: DescMessage): Check[] {
  let checks = compiled.get(desc);
  if (!checks) {
    // Register before compiling fields so recursive message types terminate.
    checks = [];
    compiled.set(desc, checks);
    checks.push(...compileMessage(desc));
  }
  return checks;
}

function compileMessage(desc: DescMessage): Check[] {
  const checks: Check[] = [];
  for (const field of desc.fields) {
    const rules = hasOption(field, validate) ? getOption(field, validate) : undefined;
    if (rules) checks.push(compileFieldRules(field, rules));
    if (isFloatingPoint(field)) checks.push(compileFinite(field));
    const nested = nestedMessage(field);
    if (nested?.typeName === "google.protobuf.Struct" && field.fieldKind === "message") checks.push(compileStructValues(field));
    else if (nested?.typeName === "google.protobuf.Timestamp") checks.push(compileTimestamp(field));
    else if (nested && !isWellKnown(nested)) checks.push(compileNested(field, nested));
  }
  if (hasOption(desc, message_rules)) {
    const oneOf = getOption(desc, message_rules).requireOneOf;
    if (oneOf.length > 0) {
      const fields = oneOf.map((jsonName) => {
        const field = desc.fields.find((f) => f.jsonName === jsonName);
        if (!field) throw new Error(`${desc.typeName}: require_one_of names unknown field ${jsonName}`);
        return field;
      });
      const names = oneOf.join(", ");
      checks.push((message, prefix, out) => {
        if (!fields.some((field) => isSet(field, message[field.localName]))) {
          out.push({ field: prefix || "(body)", description: `one of ${names} is required` });
        }
      });
    }
  }
  return checks;
}

function nestedMessage(field: DescField): DescMessage | undefined {
  if (field.fieldKind === "message") return field.message;
  if (field.fieldKind === "list" && field.listKind === "message") return field.message;
  return undefined;
}

function isFloatingPoint(field: DescField): boolean {
  const scalar = field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar") ? field.scalar : undefined;
  return scalar === ScalarType.DOUBLE || scalar === ScalarType.FLOAT;
}

/**
 * Binary protobuf carries NaN and ±Infinity in doubles, and JSON numbers too
 * large for a double parse as Infinity; none of them means anything here, and
 * the evidence's canonical JSON cannot hold them. Refused for every double,
 * with or without rules of its own.
 */
function compileFinite(field: DescField): Check {
  const name = field.jsonName;
  return (message, prefix, out) => {
    const value = message[field.localName];
    if (Array.isArray(value)) {
      for (let index = 0; index < value.length; index++) {
        const item: unknown = value[index];
        if (typeof item === "number" && !Number.isFinite(item)) out.push({ field: pathOf(prefix, name, index), description: "must be a finite number" });
      }
    } else if (typeof value === "number" && !Number.isFinite(value)) {
      out.push({ field: prefix + name, description: "must be a finite number" });
    }
  };
}

/**
 * Policy rules read metadata on every decision, on the request thread: they
 * may loop over its lists and match its strings, so its size bounds what a
 * rule costs (docs/policies.md). Besides finite numbers, a Struct's strings
 * hold at most 1,024 characters and its lists at most 100 items, checked
 * everywhere inside it, named by JSON path. protobuf-es holds a Struct field
 * as its plain JSON object.
 */
const MAX_STRUCT_STRING = 1_024;
const MAX_STRUCT_LIST = 100;
/**
 * Objects and lists inside a Struct, one in another: 30, so that a REST body (the request object and the
 * Struct's own object around them) stays within its 32 levels, and every protocol refuses the same bodies.
 */
const MAX_STRUCT_DEPTH = 30;

function compileStructValues(field: DescField): Check {
  return (message, prefix, out) => {
    const value = message[field.localName];
    if (value !== undefined) structValues(value as JsonValue, prefix, field.jsonName, -1, out, 0);
  };
}

/**
 * Checks one value inside a Struct, `depth` objects and lists deep; its path (parent, key, list index) is
 * joined only to descend or to report.
 */
function structValues(value: JsonValue, parent: string, key: string, index: number, out: Violation[], depth: number): void {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) out.push({ field: pathOf(parent, key, index), description: "must be a finite number" });
  } else if (typeof value === "string") {
    if (codePointLength(value, MAX_STRUCT_STRING) > MAX_STRUCT_STRING) {
      out.push({ field: pathOf(parent, key, index), description: `must be at most ${MAX_STRUCT_STRING} characters` });
    } else if (hasLoneSurrogate(value)) {
      // Stored as sent, it would read back as U+FFFD over the binary protocols, and two keys as one.
      out.push({ field: pathOf(parent, key, index), description: "must be valid Unicode text: it holds a lone UTF-16 surrogate" });
    }
  } else if (value !== null && typeof value === "object" && depth > MAX_STRUCT_DEPTH) {
    out.push({ field: pathOf(parent, key, index), description: `is nested deeper than ${MAX_STRUCT_DEPTH} levels` });
  } else if (Array.isArray(value)) {
    if (value.length > MAX_STRUCT_LIST) out.push({ field: pathOf(parent, key, index), description: `must have at most ${MAX_STRUCT_LIST} items` });
    else {
      // Items are named "<path>[i]": the list's own path is the prefix of each.
      const path = pathOf(parent, key, index);
      for (let i = 0; i < value.length; i++) structValues(value[i] as JsonValue, "", path, i, out, depth + 1);
    }
  } else if (value !== null && typeof value === "object") {
    const prefix = `${pathOf(parent, key, index)}.`;
    for (const child in value) {
      // Keys are strings rules read too; named by their parent, since the key itself may be the long part.
      if (codePointLength(child, MAX_STRUCT_STRING) > MAX_STRUCT_STRING) {
        out.push({ field: pathOf(parent, key, index), description: `has a key longer than ${MAX_STRUCT_STRING} characters` });
      } else if (hasLoneSurrogate(child)) {
        out.push({ field: pathOf(parent, key, index), description: "has a key that is not valid Unicode text: it holds a lone UTF-16 surrogate" });
      } else {
        structValues(value[child] as JsonValue, prefix, child, -1, out, depth + 1);
      }
    }
  }
}

/**
 * A Timestamp holds what RFC 3339 can write: 0001-01-01T00:00:00Z to
 * 9999-12-31T23:59:59.999999999Z. JSON cannot carry anything else, but binary
 * protobuf (gRPC, Connect) can, and a value past it could be stored and then
 * never be read back as JSON.
 */
const MIN_TIMESTAMP_SECONDS = -62_135_596_800n;
const MAX_TIMESTAMP_SECONDS = 253_402_300_799n;

function compileTimestamp(field: DescField): Check {
  const name = field.jsonName;
  const check = (value: unknown, path: () => string, out: Violation[]) => {
    const { seconds, nanos } = value as Timestamp;
    if (seconds < MIN_TIMESTAMP_SECONDS || seconds > MAX_TIMESTAMP_SECONDS || nanos < 0 || nanos > 999_999_999) {
      out.push({ field: path(), description: "must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z" });
    }
  };
  return (message, prefix, out) => {
    const value = message[field.localName];
    if (Array.isArray(value)) value.forEach((item, index) => check(item, () => pathOf(prefix, name, index), out));
    else if (value !== undefined) check(value, () => prefix + name, out);
  };
}

/** Other google.protobuf types carry no rules of ours. */
function isWellKnown(desc: DescMessage): boolean {
  return desc.typeName.startsWith("google.protobuf.");
}

function compileNested(field: DescField, nested: DescMessage): Check {
  const name = field.jsonName;
  return (message, prefix, out) => {
    const value = message[field.localName];
    if (Array.isArray(value)) {
      for (let index = 0; index < value.length; index++) runChecks(nested, value[index] as Fields, `${pathOf(prefix, name, index)}.`, out);
    } else if (value !== undefined) {
      runChecks(nested, value as Fields, `${prefix}${name}.`, out);
    }
  };
}

function isSet(field: DescField, value: unknown): boolean {
  if (value === undefined || value === null) return false;
  if (typeof value === "string") return value.trim() !== "";
  if (Array.isArray(value)) return value.length > 0;
  return field.fieldKind !== "scalar" || field.proto.proto3Optional || value !== 0;
}

function codePointLength(value: string, max: number): number {
  // Cheap path: UTF-16 length bounds the code point count from above.
  return value.length <= max ? value.length : codePoints(value);
}

const valueSets = createRegistry(file_fraud_v1_value_sets);

/** The strings of a named value set (value_sets.proto), in declaration order. */
function valueSet(name: string, field: DescField): string[] {
  const set = valueSets.getEnum(name);
  if (!set) throw new Error(`${field.parent.typeName}.${field.name}: unknown value set ${name}`);
  return set.values.filter((value) => hasOption(value, string_value)).map((value) => getOption(value, string_value));
}

function compileFieldRules(field: DescField, rules: FieldRules): Check {
  const allowedValues = rules.valueSet ? valueSet(rules.valueSet, field) : rules.allowedValues;
  const allowed = allowedValues.length > 0 ? new Set(allowedValues) : undefined;
  const allowedText = allowedValues.join(", ");
  const format = rules.format;

  const name = field.jsonName;
  // An empty string is "not set" only for a plain proto3 string (the absence of `required` is its rule); an
  // `optional` field that was sent, or a list item, is a value like any other.
  const emptyMeansUnset = field.fieldKind === "scalar" && field.presence === FeatureSet_FieldPresence.IMPLICIT;
  const checkValue = (value: unknown, prefix: string, index: number, out: Violation[]) => {
    if (typeof value === "string") {
      if (value === "" && (index >= 0 || !emptyMeansUnset)) {
        // A format that names a value (an address, a code, a URL) has none empty; an empty line is one line.
        const formatNamesValue = format !== StringFormat.UNSPECIFIED && format !== StringFormat.SINGLE_LINE;
        if (allowed || formatNamesValue || rules.prefix.length > 0) out.push({ field: pathOf(prefix, name, index), description: "must not be empty" });
        return;
      }
      if (value === "") return;
      if (rules.maxLength > 0 && codePointLength(value, rules.maxLength) > rules.maxLength) {
        out.push({ field: pathOf(prefix, name, index), description: `must be at most ${rules.maxLength} characters` });
      }
      if (allowed && !allowed.has(value)) {
        out.push({ field: pathOf(prefix, name, index), description: `must be one of ${allowedText}` });
      }
      if (rules.prefix.length > 0 && !rules.prefix.some((start) => value.startsWith(start))) {
        out.push({ field: pathOf(prefix, name, index), description: `must start with ${rules.prefix.join(" or ")}` });
      }
      if (format !== StringFormat.UNSPECIFIED) {
        const problem = formatProblem(format, value);
        if (problem) out.push({ field: pathOf(prefix, name, index), description: problem });
      }
    } else if (typeof value === "number") {
      if (!Number.isFinite(value)) return; // reported once, by compileFinite
      const problem = boundsProblem(rules, value);
      if (problem) out.push({ field: pathOf(prefix, name, index), description: problem });
    }
  };

  return (message, prefix, out) => {
    const value = message[field.localName];
    if (rules.required && !isSet(field, value)) {
      // A number's zero is its unset value on the wire; where zero is out of range, the range says more
      // than "required" to a caller who sent it (a path's /versions/0).
      const zeroProblem = value === 0 ? boundsProblem(rules, 0) : undefined;
      out.push({ field: prefix + name, description: zeroProblem ?? "is required" });
      return;
    }
    if (Array.isArray(value)) {
      if (rules.maxLength > 0 && value.length > rules.maxLength) {
        out.push({ field: prefix + name, description: `must have at most ${rules.maxLength} items` });
      }
      if (field.fieldKind === "list" && field.listKind === "scalar") {
        for (let index = 0; index < value.length; index++) checkValue(value[index], prefix, index, out);
      }
      return;
    }
    checkValue(value, prefix, -1, out);
  };
}

/**
 * ISO 4217 codes: the currencies Node's ICU knows (current ones, and a few it still keeps after their
 * withdrawal, which stored histories may hold), with the standard's current codes that ICU leaves out: a
 * recent currency, precious metals, funds and settlement units. A made-up code would start an amount history of its own.
 */
const CURRENCIES: ReadonlySet<string> = new Set([
  ...Intl.supportedValuesOf("currency"),
  // VED (Venezuela's digital bolívar, 2021) is in the standard but not in every ICU.
  "VED",
  ...["XAU", "XAG", "XPT", "XPD", "XBA", "XBB", "XBC", "XBD", "XUA", "XTS", "XXX"],
  ...["BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "UYI", "UYW"],
]);

/** What a single-line string must not hold: control characters, and the line and paragraph separators, which break a line too. */
export const NOT_IN_A_LINE = /[\p{Cc}\p{Zl}\p{Zp}]/u;

function formatProblem(format: StringFormat, value: string): string | undefined {
  switch (format) {
    case StringFormat.IP:
      return isIP(value) === 0 ? "must be an IPv4 or IPv6 address" : undefined;
    case StringFormat.CURRENCY:
      if (!/^[A-Z]{3}$/.test(value)) return "must be an ISO 4217 code of three upper-case letters";
      return CURRENCIES.has(value) ? undefined : `is not an ISO 4217 currency code`;
    case StringFormat.URL: {
      let url: URL;
      try {
        url = new URL(value);
      } catch {
        return "must be an absolute URL";
      }
      return url.protocol === "http:" || url.protocol === "https:" ? undefined : "must be an http or https URL";
    }
    case StringFormat.SINGLE_LINE: {
      const control = NOT_IN_A_LINE.exec(value);
      if (control === null) return undefined;
      const kind = /\p{Cc}/u.test(control[0]) ? "control character" : /\p{Zl}/u.test(control[0]) ? "line separator" : "paragraph separator";
      return `must be one line of text: it holds the ${kind} U+${control[0].codePointAt(0)?.toString(16).toUpperCase().padStart(4, "0")}`;
    }
    default:
      return undefined;
  }
}
