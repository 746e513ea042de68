import { describe, expect, it } from "vitest";
import { rewriteKeywords } from "../../src/policies/keywords.js";

describe("rewriteKeywords", () => {
  it("maps AND, OR and NOT to CEL operators", () => {
    expect(rewriteKeywords("score >= 30 AND score < 70")).toBe("score >= 30 &&  score < 70");
    expect(rewriteKeywords("a OR b")).toBe("a || b");
    expect(rewriteKeywords("NOT a")).toBe("!   a");
    expect(rewriteKeywords("NOT(a)AND(b)")).toBe("!  (a)&& (b)");
  });

  it("keeps every offset, so parser positions point into the text as written", () => {
    for (const source of ["a AND b OR NOT c", "NOT NOT x", "x AND\n  y"]) {
      expect(rewriteKeywords(source)).toHaveLength(source.length);
    }
  });

  it("leaves identifiers that contain a keyword and other cases alone", () => {
    const source = "os == ANDROID || NOTE || ORDER || and || or || not || AND_X || X_AND || a.ORx";
    expect(rewriteKeywords(source)).toBe(source);
  });

  it("never rewrites inside string literals of any kind", () => {
    const literals = [
      `'AND'`,
      `"a OR b"`,
      `'''NOT a\nAND b'''`,
      `"""OR"""`,
      `r'\\d AND'`,
      `"\\" AND "`,
      `b'NOT'`,
      `R"AND"`,
    ];
    for (const literal of literals) {
      expect(rewriteKeywords(`x == ${literal} AND y`)).toBe(`x == ${literal} &&  y`);
    }
  });

  it("ends a raw literal at the first quote: a backslash does not escape there", () => {
    expect(rewriteKeywords(String.raw`r'\' AND 'x'`)).toBe(String.raw`r'\' &&  'x'`);
  });

  it("does not treat r or b at the start of an identifier as a string prefix", () => {
    expect(rewriteKeywords("rb AND br")).toBe("rb &&  br");
  });

  it("skips comments and number literals", () => {
    expect(rewriteKeywords("a // x AND y\nAND b")).toBe("a // x AND y\n&&  b");
    expect(rewriteKeywords("1e5 AND 0xAB")).toBe("1e5 &&  0xAB");
  });

  it("stops an unterminated literal at the line end so the parser reports it", () => {
    expect(rewriteKeywords("'abc AND\nd AND e")).toBe("'abc AND\nd &&  e");
  });
});
