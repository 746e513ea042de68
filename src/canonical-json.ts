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
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`canonical JSON cannot hold the number ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return `[${value.map((item) => canonicalJson(item)).join(",")}]`;
  }
  const prototype: unknown = typeof value === "object" ? Object.getPrototypeOf(value) : undefined;
  if (typeof value !== "object" || (prototype !== Object.prototype && prototype !== null)) {
    throw new TypeError("canonical JSON holds only null, booleans, numbers, strings, arrays and plain objects");
  }
  const record = value as Record<string, unknown>;
  const members: string[] = [];
  for (const key of Object.keys(record).sort()) {
    const member = record[key];
    if (member === undefined) continue;
    members.push(`${JSON.stringify(key)}:${canonicalJson(member)}`);
  }
  return `{${members.join(",")}}`;
}

export function sha256Hex(text: string | Buffer): string {
  return createHash("sha256").update(text).digest("hex");
}
