// A condition's text as the CEL parser will see it, in pieces: string
// literals and comments apart from the code around them. The passes that
// read a condition before it is parsed (the keyword rewrite, the shape
// limits) share this one scan, so they agree on what is code.

export interface Token {
  /**
   * `literal`: a string or bytes literal, quotes and prefixes included; `comment`: `//` to the end of its
   * line; `word`: a run of letters, digits and `_` (identifiers, keywords, numbers or their parts); `space`: a
   * run of blanks and line breaks; `symbol`: any other single character.
   */
  readonly kind: "literal" | "comment" | "word" | "space" | "symbol";
  /** UTF-16 offsets into the source: [start, end). */
  readonly start: number;
  readonly end: number;
}

const isWordChar = (char: string): boolean => /[A-Za-z0-9_]/.test(char);
const isSpace = (char: string): boolean => /[\t\n\f\r ]/.test(char);

/** The pieces of `source` in order; together they cover it exactly. */
export function* tokensOf(source: string): Generator<Token> {
  let index = 0;
  while (index < source.length) {
    const start = index;
    const char = source.charAt(index);
    const stringEnd = stringLiteralEnd(source, index);
    if (stringEnd !== null) {
      index = stringEnd;
      yield { kind: "literal", start, end: index };
    } else if (char === "/" && source.charAt(index + 1) === "/") {
      const newline = source.indexOf("\n", index);
      index = newline === -1 ? source.length : newline;
      yield { kind: "comment", start, end: index };
    } else if (isWordChar(char)) {
      // A run starting with a digit is a number literal (1e5, 0xFF), never a keyword.
      do index++;
      while (index < source.length && isWordChar(source.charAt(index)));
      yield { kind: "word", start, end: index };
    } else if (isSpace(char)) {
      do index++;
      while (index < source.length && isSpace(source.charAt(index)));
      yield { kind: "space", start, end: index };
    } else {
      index++;
      yield { kind: "symbol", start, end: index };
    }
  }
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
