import { RE2JS } from "@bufbuild/re2";

/**
 * matches() patterns compiled once, as CEL compiles them (RE2): the checker
 * compiles a condition's pattern when the policy is saved, and evaluation
 * reuses it on every decision (CEL's own matches() compiled it at each call).
 * Conditions hold only literal patterns (checker.ts), so the set stays small;
 * the bound only guards against churn from many edited policies.
 */
const PATTERNS = new Map<string, RE2JS>();
const MAX_PATTERNS = 10_000;

/** The compiled pattern; throws RE2's syntax error for one that does not compile (not cached). */
export function compiledPattern(pattern: string): RE2JS {
  let compiled = PATTERNS.get(pattern);
  if (compiled === undefined) {
    compiled = RE2JS.compile(pattern);
    if (PATTERNS.size >= MAX_PATTERNS) PATTERNS.clear();
    PATTERNS.set(pattern, compiled);
  }
  return compiled;
}
