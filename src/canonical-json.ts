import { hash } from "node:crypto";

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
  // A call made from inside another (a getter) writes into pieces of its own.
  const pieces = writing ? new Pieces() : shared;
  const nested = writing;
  writing = true;
  try {
    write(value, pieces);
    return pieces.text();
  } finally {
    pieces.clear();
    writing = nested;
  }
}

/** What JSON.stringify escapes in a string: quote, backslash, control characters and (lone) surrogates. */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** JSON.stringify's text for a string, without calling it for the plain strings that are nearly all of them. */
function quote(text: string): string {
  return NEEDS_ESCAPE.test(text) ? JSON.stringify(text) : `"${text}"`;
}

/**
 * The text being written, as pieces joined at the end. The array is written
 * by index and never shrunk (setting an array's length lower gives its store
 * back, and growing it again allocated about twice its size per evidence);
 * slots past the end hold "" and add nothing to the join.
 */
class Pieces {
  private parts: string[] = [];
  private used = 0;

  add(piece: string): void {
    this.parts[this.used++] = piece;
  }

  text(): string {
    return this.parts.join("");
  }

  clear(): void {
    // A very large value (a big metadata object) should not keep its store for good.
    if (this.parts.length > MAX_KEPT_PIECES) this.parts = [];
    else this.parts.fill("", 0, this.used);
    this.used = 0;
  }
}
const MAX_KEPT_PIECES = 1 << 16;
const shared = new Pieces();
let writing = false;

/** An object member's text before its value, as the first member and as a later one. */
interface Member {
  key: string;
  first: string;
  next: string;
}

/**
 * Object shapes seen so far (their keys in insertion order, as a trie) with
 * their members sorted and their texts written: the evidence of every
 * decision holds the same few dozen shapes, so each is sorted and quoted once
 * instead of once per object. Bounded in shapes, keys per shape and key
 * length, since metadata objects can have any keys: past the bounds, members
 * are worked out as they come.
 */
interface Shape {
  next: Map<string, Shape> | undefined;
  members: readonly Member[] | undefined;
}
const MAX_SHAPES = 4096;
const MAX_SHAPE_KEYS = 64;
/** Request metadata keys can be as long as the body allows: only short keys are remembered (at most about 1 MB in all). */
const MAX_SHAPE_KEY_LENGTH = 64;
const shapes: Shape = { next: undefined, members: undefined };
let shapeCount = 0;

function membersOf(record: Record<string, unknown>): readonly Member[] {
  let shape: Shape = shapes;
  let keys = 0;
  // for...in gives the same order as Object.keys for plain objects (the prototype is checked by the caller).
  for (const key in record) {
    if (++keys > MAX_SHAPE_KEYS || key.length > MAX_SHAPE_KEY_LENGTH) return sortedMembers(record);
    let next = shape.next?.get(key);
    if (next === undefined) {
      if (shapeCount >= MAX_SHAPES) return sortedMembers(record);
      next = { next: undefined, members: undefined };
      (shape.next ??= new Map()).set(key, next);
      shapeCount++;
    }
    shape = next;
  }
  return (shape.members ??= sortedMembers(record));
}

function sortedMembers(record: Record<string, unknown>): Member[] {
  return Object.keys(record).sort().map((key) => ({ key, first: `${quote(key)}:`, next: `,${quote(key)}:` }));
}

// One pass over the value: the evidence of every decision is hashed over this
// text, so it is on the decide path (docs/benchmarks.md).
function write(value: unknown, out: Pieces): void {
  switch (typeof value) {
    case "string":
      out.add(quote(value));
      return;
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`canonical JSON cannot hold the number ${value}`);
      // For finite numbers JSON.stringify writes exactly String(value) (and -0 as 0).
      out.add(String(value));
      return;
    case "boolean":
      out.add(value ? "true" : "false");
      return;
    case "object":
      break;
    default:
      throw new TypeError("canonical JSON holds only null, booleans, numbers, strings, arrays and plain objects");
  }
  if (value === null) {
    out.add("null");
    return;
  }
  if (Array.isArray(value)) {
    out.add("[");
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out.add(",");
      write(value[i], out);
    }
    out.add("]");
    return;
  }
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) {
    throw new TypeError("canonical JSON holds only null, booleans, numbers, strings, arrays and plain objects");
  }
  const record = value as Record<string, unknown>;
  out.add("{");
  let first = true;
  for (const member of membersOf(record)) {
    const memberValue = record[member.key];
    if (memberValue === undefined) continue;
    out.add(first ? member.first : member.next);
    first = false;
    write(memberValue, out);
  }
  out.add("}");
}

/** One-shot (no Hash object to build and collect): this runs for every decision's evidence. */
export function sha256Hex(text: string | Buffer): string {
  return hash("sha256", text, "hex");
}
