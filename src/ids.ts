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
  | "cb"
  | "aud"
  | "evt"
  | "anm";

/** Characters of the time part: 62^8 ms reach the year 8900. */
const TIME_CHARS = 8;
/** Characters of the random part: ~83 bits, so ids made in the same millisecond still never meet. */
const RANDOM_CHARS = 14;

/** Milliseconds as fixed-width base62, so that text order is time order. */
function base62Time(ms: number): string {
  let stamp = "";
  let rest = Math.max(0, Math.floor(ms));
  for (let i = 0; i < TIME_CHARS; i++) {
    stamp = BASE62[rest % 62] + stamp;
    rest = Math.floor(rest / 62);
  }
  return stamp;
}

/**
 * A new identifier: the prefix, an underscore and 22 base62 characters, the
 * first 8 the creation time in milliseconds and the other 14 random. Ids of a
 * kind sort by creation time, and — the reason for it — each new one lands at
 * the end of the B-tree indexes keyed on it (decisions, evidence, audit and
 * graph entries by decision, ...), so the decisions committed together dirty
 * the same few index pages instead of one random page each. `nowMs` is for tests.
 */
export function newId(prefix: IdPrefix, nowMs: number = Date.now()): string {
  return `${prefix}_${base62Time(nowMs)}${randomBase62(RANDOM_CHARS)}`;
}
