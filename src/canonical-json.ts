import { createHash } from "node:crypto";

/** A value that survives a JSON round trip unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * Deterministic JSON: object members sorted by key (UTF-16 code units, as
 * Array.prototype.sort compares), no whitespace, strings and numbers exactly as
 * JSON.stringify writes them. These are the rules of RFC 8785 (JCS) for the
 * values audit entries hold, so the same data always gives the same bytes and
 * therefore the same hash, whatever order its members were built in.
 *
 * Members whose value is undefined are left out, as JSON.stringify does, so an
 * object built with optional fields serialises like its JSON round trip.
 * Numbers that JSON cannot carry (NaN, Infinity) throw instead of silently
 * becoming null and hashing something other than what the caller meant.
 */
export function canonicalJson(value: unknown): string {
  // One buffer serves the calls, so its backing store is not allocated again for every evidence
  // (docs/benchmarks.md); a call made from inside another (a getter) gets one of its own.
  const nested = writing;
  const out = nested ? [] : pieces;
  writing = true;
  try {
    write(value, out);
    return out.join("");
  } finally {
    out.length = 0;
    writing = nested;
  }
}

/** What JSON.stringify escapes in a string: quote, backslash, control characters and (lone) surrogates. */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

const pieces: string[] = [];
let writing = false;

/**
 * Object shapes seen so far (their keys in insertion order, as a trie) with
 * their keys sorted: the evidence of every decision holds the same few dozen
 * shapes, so they are sorted once instead of once per object. Bounded, since
 * metadata objects can have any keys: past the bounds, keys are sorted as they come.
 */
interface Shape {
  next: Map<string, Shape> | undefined;
  sorted: readonly string[] | undefined;
}
const MAX_SHAPES = 4096;
const MAX_SHAPE_KEYS = 64;
const shapes: Shape = { next: undefined, sorted: undefined };
let shapeCount = 0;

function sortedKeys(record: Record<string, unknown>): readonly string[] {
  let shape: Shape = shapes;
  let keys = 0;
  // for...in gives the same order as Object.keys for plain objects (the prototype is checked by the caller).
  for (const key in record) {
    let next = shape.next?.get(key);
    if (next === undefined) {
      if (shapeCount >= MAX_SHAPES || ++keys > MAX_SHAPE_KEYS) return Object.keys(record).sort();
      next = { next: undefined, sorted: undefined };
      (shape.next ??= new Map()).set(key, next);
      shapeCount++;
    } else if (++keys > MAX_SHAPE_KEYS) {
      return Object.keys(record).sort();
    }
    shape = next;
  }
  return (shape.sorted ??= Object.keys(record).sort());
}

/** JSON.stringify's text for a string, in pieces, without calling it for the plain strings that are nearly all of them. */
function writeString(text: string, out: string[]): void {
  if (NEEDS_ESCAPE.test(text)) out.push(JSON.stringify(text));
  else out.push('"', text, '"');
}

// One pass appending to one array of pieces: the evidence of every decision is
// hashed over this text, so it is on the decide path (docs/benchmarks.md).
function write(value: unknown, out: string[]): void {
  switch (typeof value) {
    case "string":
      writeString(value, out);
      return;
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`canonical JSON cannot hold the number ${value}`);
      // For finite numbers JSON.stringify writes exactly String(value) (and -0 as 0).
      out.push(String(value));
      return;
    case "boolean":
      out.push(value ? "true" : "false");
      return;
    case "object":
      break;
    default:
      throw new TypeError("canonical JSON holds only null, booleans, numbers, strings, arrays and plain objects");
  }
  if (value === null) {
    out.push("null");
    return;
  }
  if (Array.isArray(value)) {
    out.push("[");
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out.push(",");
      write(value[i], out);
    }
    out.push("]");
    return;
  }
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) {
    throw new TypeError("canonical JSON holds only null, booleans, numbers, strings, arrays and plain objects");
  }
  const record = value as Record<string, unknown>;
  out.push("{");
  let first = true;
  for (const key of sortedKeys(record)) {
    const member = record[key];
    if (member === undefined) continue;
    if (!first) out.push(",");
    first = false;
    writeString(key, out);
    out.push(":");
    write(member, out);
  }
  out.push("}");
}

export function sha256Hex(text: string | Buffer): string {
  return createHash("sha256").update(text).digest("hex");
}
