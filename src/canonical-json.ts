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
  const out: string[] = [];
  write(value, out);
  return out.join("");
}

/** What JSON.stringify escapes in a string: quote, backslash, control characters and (lone) surrogates. */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** JSON.stringify's text for a string, without calling it for the plain strings that are nearly all of them. */
function quote(text: string): string {
  return NEEDS_ESCAPE.test(text) ? JSON.stringify(text) : `"${text}"`;
}

// One pass appending to one array of pieces: the evidence of every decision is
// hashed over this text, so it is on the decide path (docs/benchmarks.md).
function write(value: unknown, out: string[]): void {
  switch (typeof value) {
    case "string":
      out.push(quote(value));
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
  for (const key of Object.keys(record).sort()) {
    const member = record[key];
    if (member === undefined) continue;
    out.push(first ? `${quote(key)}:` : `,${quote(key)}:`);
    first = false;
    write(member, out);
  }
  out.push("}");
}

export function sha256Hex(text: string | Buffer): string {
  return createHash("sha256").update(text).digest("hex");
}
