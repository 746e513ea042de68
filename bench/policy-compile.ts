// What compiling the costliest conditions the limits let through costs, on
// the thread that answers every account's requests: each shape filled to a
// condition's 4,096 characters, then a policy of four of the costliest
// (16,384 characters, what one save compiles) and an account's 64 (262,144
// characters, what the first decide after a restart compiles). Not a test
// (timings vary by machine); run with:
//   node --import tsx bench/policy-compile.ts

import { compilePolicyUncached, formatCompileError } from "../src/policies/index.js";
import type { PolicyDefinition } from "../src/policies/index.js";
import { policy } from "../test/policies/fixtures.js";

const CONDITION_CHARACTERS = 4_096;

/** `unit` repeated, joined by `separator`, between `head` and `tail`, as long as it fits in a condition. */
function filled(head: string, unit: string, tail: string, separator = ""): string {
  const count = Math.floor((CONDITION_CHARACTERS - head.length - tail.length + separator.length) / (unit.length + separator.length));
  return head + Array.from({ length: count }, () => unit).join(separator) + tail;
}

const chain = (links: number) => `metadata${".a".repeat(links)}`;
const indexes = (links: number) => `metadata${'["a"]'.repeat(links)}`;
const nested = (depth: number, inner: string) => `${"(".repeat(depth)}${inner}${")".repeat(depth)}`;

const SHAPES: ReadonlyArray<readonly [string, string]> = [
  ["chain of 32 selections, repeated", filled("", `${chain(32)} == 1`, "", " || ")],
  ["chain of 32 indexes, repeated", filled("", `${indexes(32)} == 1`, "", " || ")],
  ["has() of a chain of 32, repeated", filled("", `has(${chain(32)})`, "", " || ")],
  ["32 parentheses deep, repeated", filled("", nested(32, "score > 1"), "", " || ")],
  ["32 deep around a chain of 32, repeated", filled("", nested(31, `${chain(32)} == 1`), "", " || ")],
  ["score > 1 || …", filled("", "score > 1", "", " || ")],
  ["score>1&&…", filled("", "score>1", "", "&&")],
  ["true ? true : … false", filled("", "true ? true : ", "false")],
  ["a list of one-digit numbers", filled("score in [", "1", "]", ",")],
  ["a list of empty strings", filled("userId in [", "''", "]", ",")],
  ["a list of 1,000 numbers", `score in [${Array.from({ length: 1_000 }, (_, i) => i).join(",")}]`],
  ["1 + 1 + … (refused: nested too deeply)", filled("", "1", " > 0", "+")],
  ["chain of 2,000 selections (refused)", `${chain(2_000)} == 1`],
  ["chain of 800 indexes (refused)", `${indexes(800)} == 1`],
  ["2,000 parentheses deep (refused)", nested(2_000, "true")],
];

/** Best of `rounds`: the machine is shared, and the minimum is the least disturbed measurement. */
function bestMillis(rounds: number, run: () => void): number {
  let best = Infinity;
  for (let round = 0; round < rounds; round++) {
    const start = performance.now();
    run();
    best = Math.min(best, performance.now() - start);
  }
  return best;
}

function compileAll(definitions: readonly PolicyDefinition[]): string {
  const refusals = definitions.flatMap((definition) => {
    const result = compilePolicyUncached(definition);
    return result.ok ? [] : result.errors.map(formatCompileError);
  });
  return refusals[0] ?? "";
}

// Warm the parser and planner up on every shape before measuring: the first shapes measured would otherwise
// pay for the JIT.
for (const [, condition] of SHAPES) compileAll([policy([{ condition, action: "deny" }])]);

let costliest = { name: "", condition: "", millis: 0 };
for (const [name, condition] of SHAPES) {
  if ([...condition].length > CONDITION_CHARACTERS) throw new Error(`${name}: ${[...condition].length} characters`);
  let refusal = "";
  const millis = bestMillis(5, () => {
    refusal = compileAll([policy([{ condition, action: "deny" }])]);
  });
  console.log(`${name.padEnd(42)} ${String(condition.length).padStart(5)} chars ${millis.toFixed(1).padStart(7)} ms${refusal ? `  ${refusal.slice(0, 90)}` : ""}`);
  if (refusal === "" && millis > costliest.millis) costliest = { name, condition, millis };
}

const rules = Array.from({ length: 4 }, () => ({ condition: costliest.condition, action: "deny" }));
const onePolicy = bestMillis(3, () => compileAll([policy(rules)]));
console.log(`one policy, four of "${costliest.name}" (16,384 characters): ${onePolicy.toFixed(0)} ms`);
const account = Array.from({ length: 16 }, () => policy(rules));
const wholeAccount = bestMillis(1, () => compileAll(account));
console.log(`an account's 16 such policies (262,144 characters), as the first decide after a restart compiles them: ${wholeAccount.toFixed(0)} ms`);
