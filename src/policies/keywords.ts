// The specification writes conditions as `score >= 30 AND score < 70`; CEL
// spells the operators `&&`, `||` and `!`. This rewrite maps the upper-case
// keywords onto CEL before parsing.
//
// Every replacement has exactly the length of the keyword it replaces, so an
// offset the CEL parser reports in the rewritten text is the same offset in
// the text the user wrote, and error positions need no translation.

import { tokensOf } from "./tokens.js";

const KEYWORDS: ReadonlyMap<string, string> = new Map([
  ["AND", "&& "],
  ["OR", "||"],
  ["NOT", "!  "],
]);

/**
 * Replaces the whole words AND, OR and NOT (case-sensitive) outside string
 * literals and comments. Identifiers that merely contain them (`ANDROID`,
 * `NOTE`, `or`) and text inside quotes are left alone.
 */
export function rewriteKeywords(source: string): string {
  let out = "";
  for (const token of tokensOf(source)) {
    const text = source.slice(token.start, token.end);
    out += token.kind === "word" ? (KEYWORDS.get(text) ?? text) : text;
  }
  return out;
}
