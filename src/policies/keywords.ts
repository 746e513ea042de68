// The specification writes conditions as `score >= 30 AND score < 70`; CEL
// spells the operators `&&`, `||` and `!`. This rewrite maps the upper-case
// keywords onto CEL before parsing.
//
// Every replacement has exactly the length of the keyword it replaces, so an
// offset the CEL parser reports in the rewritten text is the same offset in
// the text the user wrote, and error positions need no translation.

const KEYWORDS: ReadonlyMap<string, string> = new Map([
  ["AND", "&& "],
  ["OR", "||"],
  ["NOT", "!  "],
]);

const isWordChar = (char: string): boolean => /[A-Za-z0-9_]/.test(char);

/**
 * Replaces the whole words AND, OR and NOT (case-sensitive) outside string
 * literals and comments. Identifiers that merely contain them (`ANDROID`,
 * `NOTE`, `or`) and text inside quotes are left alone.
 */
export function rewriteKeywords(source: string): string {
  let out = "";
  let index = 0;
  while (index < source.length) {
    const char = source.charAt(index);
    const stringEnd = stringLiteralEnd(source, index);
    if (stringEnd !== null) {
      out += source.slice(index, stringEnd);
      index = stringEnd;
    } else if (char === "/" && source.charAt(index + 1) === "/") {
      const newline = source.indexOf("\n", index);
      const end = newline === -1 ? source.length : newline;
      out += source.slice(index, end);
      index = end;
    } else if (isWordChar(char)) {
      // A run starting with a digit is a number literal (1e5, 0xFF), never a keyword.
      let end = index + 1;
      while (end < source.length && isWordChar(source.charAt(end))) end++;
      const word = source.slice(index, end);
      out += KEYWORDS.get(word) ?? word;
      index = end;
    } else {
      out += char;
      index++;
    }
  }
  return out;
}

/**
 * When a string or bytes literal starts at `start` (optionally prefixed by
 * r/R for raw and b/B for bytes, in either order), returns the index just
 * after its closing quote, or where it stops when it is unterminated (the
 * parser then reports it). Returns null when no literal starts here. Only
 * called at the start of a word or on a non-word character, so a prefix
 * letter is never the tail of a longer identifier.
 */
function stringLiteralEnd(source: string, start: number): number | null {
  let index = start;
  let raw = false;
  // At most two prefix letters, and only when the literal follows directly;
  // otherwise `r` or `b` is just the start of an identifier.
  for (let prefixes = 0; prefixes < 2; prefixes++) {
    const char = source.charAt(index);
    if ((char === "r" || char === "R") && !raw) raw = true;
    else if (char !== "b" && char !== "B") break;
    index++;
  }
  const quote = source.charAt(index);
  if (quote !== '"' && quote !== "'") return null;
  const triple = source.startsWith(quote.repeat(3), index);
  const delimiter = triple ? quote.repeat(3) : quote;
  let cursor = index + delimiter.length;
  while (cursor < source.length) {
    if (!raw && source.charAt(cursor) === "\\") {
      cursor += 2;
      continue;
    }
    if (source.startsWith(delimiter, cursor)) return cursor + delimiter.length;
    // A single-quoted literal cannot span lines; let the parser report it.
    if (!triple && source.charAt(cursor) === "\n") return cursor;
    cursor++;
  }
  return source.length;
}
