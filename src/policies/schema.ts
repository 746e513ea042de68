// What a rule condition can read, and the types the static checker uses.
//
// This is the one place the variables of a condition are described. The
// signals part is written out against the engine's `Signals` interface
// through a mapped type, so adding, renaming or retyping a signal without
// updating SIGNALS_SHAPE is a TypeScript error here, and the checker can
// never drift from the engine.
//
// Every number is a CEL double at run time: the values are JSON numbers, and
// compile rewrites integer literals to doubles (see compile.ts), so the
// checker has a single `number` type.

import type { Signals } from "../engine/types.js";

export type ValueType =
  | { readonly kind: "bool" | "number" | "string" | "null" | "dyn" }
  /** A value that is either `inner` or null, such as signals.amount.value. */
  | { readonly kind: "nullable"; readonly inner: ValueType }
  | { readonly kind: "list"; readonly element: ValueType }
  /** String-keyed map; only `metadata` (a JSON object) has this type. */
  | { readonly kind: "map"; readonly value: ValueType }
  /** A fixed-shape object under `signals`: reading a field it does not have is refused. */
  | { readonly kind: "object"; readonly path: string; readonly fields: ReadonlyMap<string, ValueType> }
  /** The `lists` variable: its fields are the caller's named lists. */
  | { readonly kind: "lists" }
  /** `lists.<name>`: usable only as the right operand of `in`. */
  | { readonly kind: "namedList"; readonly name: string };

export const BOOL: ValueType = { kind: "bool" };
export const NUMBER: ValueType = { kind: "number" };
export const STRING: ValueType = { kind: "string" };
export const NULL: ValueType = { kind: "null" };
export const DYN: ValueType = { kind: "dyn" };

export const listOf = (element: ValueType): ValueType => ({ kind: "list", element });

export function typeName(type: ValueType): string {
  switch (type.kind) {
    case "nullable":
      return `${typeName(type.inner)} or null`;
    case "list":
      return `list(${typeName(type.element)})`;
    case "map":
      return `map(string, ${typeName(type.value)})`;
    case "object":
      return `object ${type.path}`;
    case "namedList":
      return `lists.${type.name}`;
    default:
      return type.kind;
  }
}

/** How one field of the signals object is described; leaves name the CEL type. */
type FieldShape<T> = [T] extends [boolean]
  ? "bool"
  : [T] extends [number]
    ? "number"
    : [T] extends [number | null]
      ? "number?"
      : [T] extends [string]
        ? "string"
        : [T] extends [readonly string[]]
          ? "string[]"
          : T extends object
            ? ObjectShape<T>
            : never;

type ObjectShape<T> = { readonly [K in keyof T]-?: FieldShape<T[K]> };

type LeafShape = "bool" | "number" | "number?" | "string" | "string[]";
type AnyShape = LeafShape | { readonly [field: string]: AnyShape };

const WINDOW_COUNTS = { lastMinute: "number", lastHour: "number", lastDay: "number" } as const;

/** The signals object (src/engine/types.ts, docs/signals.md), field by field. */
const SIGNALS_SHAPE: ObjectShape<Signals> = {
  coverage: "string",
  network: {
    ip: "string",
    present: "bool",
    valid: "bool",
    version: "number",
    rangeType: "string",
    private: "bool",
    reserved: "bool",
    tor: "bool",
    datacenter: "bool",
  },
  geo: { country: "string", countryKnown: "bool" },
  userAgent: {
    present: "bool",
    browser: "string",
    browserMajor: "number?",
    os: "string",
    deviceType: "string",
    bot: "bool",
    crawler: "bool",
    headless: "bool",
    automationTool: "string",
    automation: "bool",
  },
  device: {
    present: "bool",
    webdriver: "bool",
    vm: "bool",
    vmIndicator: "string",
    timezone: "string",
    timezoneOffsetMinutes: "number?",
    timezoneMismatch: "bool",
    timezoneGapMinutes: "number",
    platformMismatch: "bool",
    touchMismatch: "bool",
    impossibleScreen: "bool",
    noLanguages: "bool",
  },
  behavior: {
    present: "bool",
    timeOnPageMs: "number?",
    formFillMs: "number?",
    keystrokes: "number",
    pointerMoves: "number",
    pasteEvents: "number",
    clicks: "number",
    tooFast: "bool",
    noInteraction: "bool",
    pasteOnly: "bool",
  },
  email: {
    present: "bool",
    valid: "bool",
    domain: "string",
    disposable: "bool",
    plusAddressed: "bool",
    randomLocalPart: "bool",
    localPartEntropy: "number",
  },
  velocity: {
    available: "bool",
    user: WINDOW_COUNTS,
    ip: WINDOW_COUNTS,
    device: WINDOW_COUNTS,
    email: WINDOW_COUNTS,
    usersPerDevice24h: "number",
    usersPerIp24h: "number",
    burst: "bool",
    highHourly: "bool",
    highDaily: "bool",
    multiAccountDevice: "bool",
    multiAccountIp: "bool",
  },
  amount: {
    available: "bool",
    value: "number?",
    currency: "string",
    historyCount: "number",
    historyMax: "number",
    historyMean: "number",
    ratioToMax: "number?",
    ratioToMean: "number?",
    spike: "bool",
    aboveUsual: "bool",
    newCurrency: "bool",
    accountTypical: "number?",
    firstHighValue: "bool",
  },
  history: {
    available: "bool",
    userKnown: "bool",
    newDevice: "bool",
    newCountry: "bool",
    previousCountry: "string",
    secondsSincePrevious: "number?",
    travelDistanceKm: "number?",
    travelSpeedKmh: "number?",
    impossibleTravel: "bool",
  },
  graph: { available: "bool", linkedToFraud: "bool", hops: "number?", fraudNeighbours: "number" },
  consortium: { available: "bool", matches: "number", indicatorTypes: "string[]" },
  lists: { denylisted: "bool" },
};

const LEAF_TYPES: Readonly<Record<LeafShape, ValueType>> = {
  bool: BOOL,
  number: NUMBER,
  "number?": { kind: "nullable", inner: NUMBER },
  string: STRING,
  "string[]": listOf(STRING),
};

function typeFromShape(shape: AnyShape, path: string): ValueType {
  if (typeof shape === "string") return LEAF_TYPES[shape];
  const fields = new Map<string, ValueType>();
  for (const [field, fieldShape] of Object.entries(shape)) {
    fields.set(field, typeFromShape(fieldShape, `${path}.${field}`));
  }
  return { kind: "object", path, fields };
}

/**
 * The variables of a condition (documented in docs/policies.md). Request
 * fields that were not given are "" (and amount 0), as in proto3, so they can
 * be compared without a null check.
 */
export const VARIABLES: ReadonlyMap<string, ValueType> = new Map<string, ValueType>([
  ["score", NUMBER],
  ["action", STRING],
  ["amount", NUMBER],
  ["currency", STRING],
  ["userId", STRING],
  ["email", STRING],
  ["ip", STRING],
  ["deviceId", STRING],
  // google.protobuf.Struct: any JSON value, so reads are checked at run time.
  ["metadata", { kind: "map", value: DYN }],
  ["signals", typeFromShape(SIGNALS_SHAPE, "signals")],
  ["lists", { kind: "lists" }],
]);
