// Metering of one rule's evaluation. The checker's limits (no nested loops, at most four, bounded patterns
// and built values) bound a rule's cost only up to the product of what it reads: a loop over a 1,000-item
// list that searches another 1,000-item list with `in` is a million comparisons, and comparing lists of
// lists multiplies again. So the work that grows with the data is counted as it is done, in steps (a loop
// iteration's expression nodes, an item compared, touched or copied, 16 characters searched, 4 looked up), and a rule
// that would pass RULE_STEP_LIMIT stops with an error instead of holding the thread that runs it.

import { isCelList, isCelMap, isCelUint, type CelList, type CelMap, type CelValue } from "@bufbuild/cel";

/** Steps one rule may take: ordinary rules take tens; this is a few milliseconds of the thread. */
export const RULE_STEP_LIMIT = 50_000;

export const STEP_LIMIT_MESSAGE = `the rule stopped after ${RULE_STEP_LIMIT} steps, the most one evaluation may take: it searches, compares or builds too much`;

/** Steps a key looked up costs besides its length (chargeLookup). */
const LOOKUP_STEPS = 10;

/** Characters of a string searched or copied, or items of a list copied, per step. */
const CHARACTERS_PER_STEP = 16;
const ITEMS_PER_STEP = 16;

// Rules run synchronously, one at a time per thread, so one counter per thread serves.
let steps = 0;

/** Starts counting for a rule's evaluation. */
export function startRule(): void {
  steps = 0;
}

/** Whether the rule evaluated since startRule() went past the limit (its result, whatever it is, stands for nothing). */
export function ruleStopped(): boolean {
  return steps > RULE_STEP_LIMIT;
}

/**
 * Counts `n` steps, throwing once past the limit. CEL turns the throw into an error value, which a loop stops
 * on; `||` and `&&` may absorb it, but every later charge throws at once, so what is left of the rule is its
 * own expression nodes, never more data; ruleStopped() then tells the caller.
 */
export function charge(n: number): void {
  steps += n;
  if (steps > RULE_STEP_LIMIT) throw new Error(STEP_LIMIT_MESSAGE);
}

export function chargeText(text: string): void {
  charge(1 + Math.floor(text.length / CHARACTERS_PER_STEP));
}

/** `items` list items copied. */
export function chargeCopy(items: number): void {
  charge(1 + Math.floor(items / ITEMS_PER_STEP));
}

/**
 * A key looked up in a map or a named list. A list's matcher reads the whole key, and more slowly than a
 * search does (an e-mail list lowercases it, where "İ" costs ten times "a"; an IP list parses it and searches
 * its ranges): LOOKUP_STEPS, and a step per 4 characters.
 */
export function chargeLookup(key: string): void {
  charge(LOOKUP_STEPS + Math.floor(key.length / 4));
}

/** CEL equality (numbers across types, NaN unequal, lists and maps by content), a step per value compared. */
export function meteredEquals(left: CelValue, right: CelValue): boolean {
  charge(1);
  if (left === right) return true;
  const l = isCelUint(left) ? left.value : left;
  const r = isCelUint(right) ? right.value : right;
  if ((typeof l === "number" || typeof l === "bigint") && (typeof r === "number" || typeof r === "bigint")) return l == r;
  if (isCelList(l)) return isCelList(r) && listsEqual(l, r);
  if (isCelMap(l)) return isCelMap(r) && mapsEqual(l, r);
  // Strings, booleans and null are equal only when identical, which the first test covers.
  return false;
}

function listsEqual(left: CelList, right: CelList): boolean {
  if (left.size !== right.size) return false;
  const rightItems = right[Symbol.iterator]();
  for (const item of left) {
    if (!meteredEquals(item, rightItems.next().value as CelValue)) return false;
  }
  return true;
}

function mapsEqual(left: CelMap, right: CelMap): boolean {
  if (left.size !== right.size) return false;
  for (const [key, value] of left) {
    const other = right.get(key);
    if (other === undefined || !meteredEquals(value, other)) return false;
  }
  return true;
}

/** `value in list`, comparing as `==` does. */
export function meteredIn(value: CelValue, list: CelList): boolean {
  charge(1);
  for (const item of list) if (meteredEquals(value, item)) return true;
  return false;
}
