import { createHash } from "node:crypto";

/**
 * Deterministic JSON: object keys sorted at every level, no whitespace. Two
 * equal values always serialise to the same bytes, so their hashes can be
 * compared across processes and time (evidence integrity, audit chain).
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, current: unknown) => {
    if (current === null || typeof current !== "object" || Array.isArray(current)) return current;
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(current).sort()) sorted[key] = (current as Record<string, unknown>)[key];
    return sorted;
  });
}

export function sha256Hex(text: string | Buffer): string {
  return createHash("sha256").update(text).digest("hex");
}
