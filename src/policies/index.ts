// Policy evaluation: compile rule conditions once per policy version, then
// evaluate them per decision (live, shadow or backtest) with one function.
// See docs/policies.md.

export { compilePolicy, compilePolicyUncached, formatCompileError, PolicyCache } from "./compile.js";
export { DEFAULT_POLICY } from "./default-policy.js";
export { BUDGET_EXHAUSTED, POLICY_REASONS, decidedByOwnPolicy, decisionOf, decisionReasons, evaluatePolicies } from "./evaluate.js";
export type { EvaluationBudget, EvaluationContext, PolicyEvaluation, PolicyResult, RuleError } from "./evaluate.js";
export { ListSnapshot, MAX_LIST_ENTRIES, MAX_LISTS, isUsableNewListName, isValidListName, normalizeListEntry } from "./lists.js";
export type { ListDefinition, ListKind, ListMatcher } from "./lists.js";
export { POLICY_STATUSES, RULE_ACTIONS } from "./model.js";
export type {
  CompileResult,
  CompiledPolicy,
  CompiledRule,
  PolicyCompileError,
  PolicyDefinition,
  PolicyStatus,
  RuleAction,
  RuleDefinition,
  SourcePosition,
} from "./model.js";
