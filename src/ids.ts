import { randomBytes } from "node:crypto";

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Random bytes are drawn from the CSPRNG in blocks: one call serves many ids. */
const POOL_SIZE = 4096;
let pool = randomBytes(POOL_SIZE);
let poolOffset = 0;

function nextRandomByte(): number {
  if (poolOffset === POOL_SIZE) {
    pool = randomBytes(POOL_SIZE);
    poolOffset = 0;
  }
  return pool[poolOffset++] as number;
}

/**
 * Random base62 text by rejection sampling, so every character is uniformly
 * distributed (a plain `byte % 62` would favour the first 8 symbols).
 */
export function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    const byte = nextRandomByte();
    if (byte < 248) out += BASE62[byte % 62];
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
  | "fb"
  | "cb";

/** A new identifier: the prefix, an underscore and 22 base62 characters (~131 bits). */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomBase62(22)}`;
}
