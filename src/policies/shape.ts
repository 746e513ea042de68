// Limits on a condition's shape, checked on its text before it is parsed.
//
// Compiling runs on the thread that answers every account's requests. Its
// cost follows a condition's length except in one shape: @bufbuild/cel parses
// and plans a chain of field selections or indexes (`metadata.a.a…`,
// `metadata["a"]["a"]…`) in time that grows with the square of the chain's
// length (2,000 links in 4,013 characters: 144–340 ms). And the parser
// recurses once per bracket level, so deep nesting runs it out of stack at a
// depth that depends on what else is on the thread's stack. One linear scan
// of the text refuses both before any of that runs; docs/policies.md gives the
// measurements (bench/policy-compile.ts).

import { tokensOf } from "./tokens.js";

/** Field selections and indexes one operand may take in a row (`signals.velocity.user.lastHour` takes 3). */
export const MAX_CHAIN = 32;
/** Parentheses, brackets and braces open at once. */
export const MAX_NESTING = 32;

/**
 * The first limit `source` breaks, with the offset it is broken at, or null.
 * Give it the text the parser will read (after rewriteKeywords), so that `NOT`
 * reads as the operator it is.
 */
export function shapeProblem(source: string): { message: string; offset: number } | null {
  /** The brackets open, each with the chain its operand had reached where it opened. */
  const open: Array<{ start: number; chainBefore: number; call: boolean }> = [];
  /** Selections and indexes in a row on the operand being read. */
  let chain = 0;
  let previous = "";
  const tooLong = (offset: number) => ({ message: `more than ${MAX_CHAIN} field selections and indexes in a row (a.b.c…, a[0][1]…), the most a condition may chain`, offset });
  for (const token of tokensOf(source)) {
    if (token.kind === "space" || token.kind === "comment") continue;
    const text = source.slice(token.start, token.end);
    if (token.kind === "word") {
      // A word right after a dot is the field selected; any other starts an operand (or is `in`).
      if (previous !== ".") chain = 0;
    } else if (token.kind === "literal") {
      chain = 0;
    } else if (text === ".") {
      if (++chain > MAX_CHAIN) return tooLong(token.start);
    } else if (text === "(" || text === "[" || text === "{") {
      if (open.length === MAX_NESTING) {
        return { message: `the condition is nested too deeply: more than ${MAX_NESTING} parentheses and brackets open at once`, offset: token.start };
      }
      // `f(` and `x.f(` call; `(` after anything else (an operator, `in`) groups.
      const call = text === "(" && /^[A-Za-z_]/.test(previous) && previous !== "in";
      open.push({ start: token.start, chainBefore: chain, call });
      chain = 0;
    } else if (text === ")" || text === "]" || text === "}") {
      const closed = open.pop();
      // Unbalanced: the parser reports it, and the scan reads on as after any operator.
      if (closed === undefined) chain = 0;
      else if (text === "]") {
        // An index, or a list literal that starts a chain: one link either way.
        chain = closed.chainBefore + 1;
        if (chain > MAX_CHAIN) return tooLong(closed.start);
      } else if (closed.call || text === "}") {
        chain = closed.chainBefore;
      }
      // A group's value is its content's, so `(a.b).c` continues the chain its content ended with.
    } else {
      chain = 0;
    }
    previous = text;
  }
  return null;
}
