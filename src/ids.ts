import { randomBytes } from "node:crypto";

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/**
 * Encodes random bytes in base62 by rejection sampling, so every character is
 * uniformly distributed (a plain `byte % 62` would favour the first 8 symbols).
 */
export function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

/** Public identifier prefixes; the specification fixes evi_, req_, dec_, vis_, dfp_ and case_. */
export type IdPrefix =
  | "acct"
  | "key"
  | "req"
  | "dec"
  | "evi"
  | "vis"
  | "dfp"
  | "case"
  | "pol"
  | "whe"
  | "fb";

/** A new identifier: the prefix, an underscore and 22 base62 characters (~131 bits). */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomBase62(22)}`;
}
