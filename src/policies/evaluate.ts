// The one evaluation path for live decisions, shadow evaluation and
// backtesting: given compiled policies and one decision's inputs it returns
// the final decision and every policy's result. It is pure (no I/O, no
// clock) and never throws on a rule's behalf, so a replay of a stored
// decision reproduces what happened live.

import { celList, celMap, isCelError } from "@bufbuild/cel";
import type { CelInput } from "@bufbuild/cel";
import type { JsonObject } from "@bufbuild/protobuf";
import { decideFromScore } from "../engine/score.js";
import type { Decision } from "../engine/score.js";
import type { Signals } from "../engine/types.js";
import { STEP_LIMIT_MESSAGE, ruleStopped, startRule } from "./cost.js";
import { DEFAULT_POLICY } from "./default-policy.js";
import { ListSnapshot, comparedForm } from "./lists.js";
import type { CompiledPolicy, CompiledRule, RuleAction } from "./model.js";

/**
 * One decision's inputs. Stored decisions carry all of them but the lists, which backtests take as they are
 * now (docs/policies.md, Backtests): nothing records what each list held at each decision.
 */
export interface EvaluationContext {
  /** The engine's 0..100 score. */
  readonly score: number;
  /** Request action: login, signup, checkout, ... */
  readonly action: string;
  readonly userId: string;
  /** Absent fields read as "" (amount 0) in conditions, as in proto3. */
  readonly amount?: number | undefined;
  readonly currency?: string | undefined;
  /** As the request gave it (a stored one, in a backtest): rules read it in the form lists compare it in. */
  readonly email?: string | undefined;
  /** As the request gave it, or as resolved from the connection: rules read it in canonical form. */
  readonly ip?: string | undefined;
  readonly deviceId?: string | undefined;
  readonly metadata?: JsonObject | undefined;
  readonly signals: Signals;
  /** Defaults to no lists; a rule naming a list then records an error. */
  readonly lists?: ListSnapshot | undefined;
}

/**
 * Bounds one phase of a decision's evaluation (its active policies, then its
 * shadow ones): once exhausted, the rules not yet evaluated count as not
 * matched, each policy recording why. Live decisions pass one per phase (the
 * request thread must not be held, docs/policies.md); replays pass none and
 * evaluate everything.
 */
export interface EvaluationBudget {
  exhausted(): boolean;
}

/** The reason code that leads a decision's reasons when a rule of an account's own policy decided it. */
export const POLICY_REASONS: Readonly<Record<RuleAction, string>> = {
  allow: "POLICY_ALLOW",
  challenge: "POLICY_CHALLENGE",
  deny: "POLICY_DENY",
  review: "POLICY_REVIEW",
};

/**
 * The reasons a decision gives: the engine's, led by the policy's code when a rule of the account's own
 * policies decided (the built-in thresholds decide by the score, which the engine's reasons explain).
 * LOW_RISK ("nothing stands out") stays only on an allow: a policy's challenge or deny contradicts it.
 */
export function decisionReasons(engineReasons: readonly string[], evaluation: PolicyEvaluation): string[] {
  const by = evaluation.decidedBy;
  if (by === null || !decidedByOwnPolicy(evaluation)) return [...engineReasons];
  const rest = evaluation.decision === "allow" ? engineReasons : engineReasons.filter((reason) => reason !== "LOW_RISK");
  return [POLICY_REASONS[by.action], ...rest];
}

/** Whether a rule of the account's own policies decided, rather than the built-in thresholds or the score. */
export function decidedByOwnPolicy(evaluation: PolicyEvaluation): boolean {
  return evaluation.decidedBy !== null && evaluation.decidedBy.policyId !== DEFAULT_POLICY.id;
}

/** The error recorded on a policy whose remaining rules the budget cut off. */
export const BUDGET_EXHAUSTED = "not evaluated: this decision's policy rules used up their time budget";

export interface RuleError {
  readonly ruleIndex: number;
  readonly message: string;
}

export interface PolicyResult {
  readonly policyId: string;
  readonly version: number;
  readonly mode: "active" | "shadow";
  /** Index of the first matching rule; -1 when none matched. */
  readonly matchedRule: number;
  /** The matching rule's action; null when none matched. */
  readonly action: RuleAction | null;
  /** Rules that failed at run time; each counted as not matched. */
  readonly errors: readonly RuleError[];
}

export interface PolicyEvaluation {
  /** The final decision. */
  readonly decision: Decision;
  /** The deciding rule's action was review: the caller opens a case whatever the score. */
  readonly review: boolean;
  /** The rule that decided; null when no active policy matched and the score decided (decideFromScore). */
  readonly decidedBy: {
    readonly policyId: string;
    readonly version: number;
    readonly ruleIndex: number;
    readonly action: RuleAction;
    readonly description: string;
  } | null;
  /** Active policies that were evaluated, in evaluation order; those below the deciding one are not. */
  readonly results: readonly PolicyResult[];
  /**
   * What the decision would have been with each shadow policy active where it stands (as a backtest of it
   * would say), in the order of `shadowResults`: the live decision when it would not have changed it.
   */
  readonly shadowDecisions: readonly Decision[];
  /** Every applicable shadow policy, in evaluation order; they never change the decision. */
  readonly shadowResults: readonly PolicyResult[];
}

const DECISION_OF: Readonly<Record<RuleAction, Decision>> = {
  allow: "allow",
  challenge: "challenge",
  deny: "deny",
  // The end user proves themselves now; an analyst looks at the case later.
  review: "challenge",
};

/** The decision a matching rule's action makes. */
export function decisionOf(action: RuleAction): Decision {
  return DECISION_OF[action];
}

/**
 * Evaluation order: priority descending; at equal priority custom policies
 * before built-in ones, then earlier creation, then id, so the order never
 * depends on how the caller happened to list them.
 */
function comparePolicies(a: CompiledPolicy, b: CompiledPolicy): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.builtIn !== b.builtIn) return a.builtIn ? 1 : -1;
  if (a.createdAtMs !== b.createdAtMs) {
    if (a.createdAtMs === null) return 1;
    if (b.createdAtMs === null) return -1;
    return a.createdAtMs - b.createdAtMs;
  }
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** A policy set in evaluation order, and which of the variables that cost a conversion its rules read. */
interface PreparedPolicies {
  ordered: readonly CompiledPolicy[];
  readsMetadata: boolean;
  readsSignals: boolean;
  readsEmail: boolean;
  readsIp: boolean;
}

/**
 * Prepared once per policy set: callers hand over the same (readonly) array
 * for every decision of a tenant until its policies change (PolicySets), and
 * for every row of a backtest.
 */
const preparedSets = new WeakMap<readonly CompiledPolicy[], PreparedPolicies>();

function prepared(policies: readonly CompiledPolicy[]): PreparedPolicies {
  let set = preparedSets.get(policies);
  if (!set) {
    const reads = (variable: string) => policies.some((policy) => policy.rules.some((rule) => rule.variables.includes(variable)));
    set = {
      ordered: [...policies].sort(comparePolicies),
      readsMetadata: reads("metadata"),
      readsSignals: reads("signals"),
      readsEmail: reads("email"),
      readsIp: reads("ip"),
    };
    preparedSets.set(policies, set);
  }
  return set;
}

/**
 * `startBudget` gives the active policies a budget, and then the shadow ones
 * another: a slow shadow policy can never use up the time of an active one
 * (a deny rule cut off would let the request through), so shadow policies
 * never change a decision.
 */
export function evaluatePolicies(policies: readonly CompiledPolicy[], context: EvaluationContext, startBudget?: () => EvaluationBudget): PolicyEvaluation {
  const lists = context.lists ?? ListSnapshot.EMPTY;
  const set = prepared(policies);
  const bindings = bindingsOf(context, lists, set);
  const results: PolicyResult[] = [];
  const shadowResults: PolicyResult[] = [];
  let decidedBy: PolicyEvaluation["decidedBy"] = null;
  const applies = (policy: CompiledPolicy) => policy.actions.size === 0 || policy.actions.has(context.action);

  const activeBudget = startBudget?.();
  /** Where the deciding policy stands in the order; past the end when the score decided. */
  let decidingAt = set.ordered.length;
  for (const [at, policy] of set.ordered.entries()) {
    if (policy.status !== "active" || !applies(policy)) continue;
    const result = evaluatePolicy(policy, "active", bindings, lists, activeBudget);
    results.push(result);
    const rule = policy.rules[result.matchedRule];
    if (rule !== undefined) {
      // First match of the highest-priority active policy is final; nothing below can change it.
      decidedBy = {
        policyId: policy.id,
        version: policy.version,
        ruleIndex: rule.index,
        action: rule.action,
        description: rule.description,
      };
      decidingAt = at;
      break;
    }
  }
  const decision = decidedBy === null ? decideFromScore(context.score) : decisionOf(decidedBy.action);
  const shadowBudget = startBudget?.();
  const shadowDecisions: Decision[] = [];
  for (const [at, policy] of set.ordered.entries()) {
    if (policy.status !== "shadow" || !applies(policy)) continue;
    const result = evaluatePolicy(policy, "shadow", bindings, lists, shadowBudget);
    shadowResults.push(result);
    // Made active where it stands, it decides only if it matches before the policy that did decide.
    const rule = policy.rules[result.matchedRule];
    shadowDecisions.push(rule !== undefined && at < decidingAt ? decisionOf(rule.action) : decision);
  }

  return {
    decision,
    review: decidedBy?.action === "review",
    decidedBy,
    results,
    shadowResults,
    shadowDecisions,
  };
}

type Bindings = Readonly<Record<string, CelInput>>;

function evaluatePolicy(
  policy: CompiledPolicy,
  mode: PolicyResult["mode"],
  bindings: Bindings,
  lists: ListSnapshot,
  budget: EvaluationBudget | undefined,
): PolicyResult {
  const errors: RuleError[] = [];
  // Object literals written out in full: a shared builder closure measured a third slower per decision.
  for (const rule of policy.rules) {
    if (budget?.exhausted()) {
      errors.push({ ruleIndex: rule.index, message: BUDGET_EXHAUSTED });
      break;
    }
    const outcome = evaluateRule(rule, bindings, lists);
    if (outcome === true) {
      const { index: matchedRule, action } = rule;
      return { policyId: policy.id, version: policy.version, mode, matchedRule, action, errors };
    }
    if (outcome !== false) errors.push({ ruleIndex: rule.index, message: outcome });
  }
  return { policyId: policy.id, version: policy.version, mode, matchedRule: -1, action: null, errors };
}

/** true or false, or the error message of a rule that could not be evaluated. */
function evaluateRule(rule: CompiledRule, bindings: Bindings, lists: ListSnapshot): boolean | string {
  const missing = rule.listNames.find((name) => !lists.has(name));
  if (missing !== undefined) return `list '${missing}' does not exist`;
  let value: unknown;
  startRule();
  try {
    value = rule.program(bindings);
  } catch (error) {
    // plan() already turns failures into CelError values; this guards the promise that evaluation never throws.
    return error instanceof Error ? error.message : String(error);
  }
  // Whatever `||` or `&&` made of the stop, the rule was not evaluated to the end.
  if (ruleStopped()) return STEP_LIMIT_MESSAGE;
  if (isCelError(value)) return value.message;
  if (typeof value === "boolean") return value;
  // Only reachable through untyped metadata, e.g. `metadata.flag` holding a string.
  return `condition evaluated to a ${value === null ? "null" : typeof value}, not a boolean`;
}

/**
 * The structured variables, and the e-mail and address, converted only when a rule reads them: most
 * policies look at the score alone.
 */
const EMPTY_CEL_MAP = celMap(new Map<string, CelInput>());

function bindingsOf(context: EvaluationContext, lists: ListSnapshot, set: PreparedPolicies): Bindings {
  return {
    score: context.score,
    action: context.action,
    amount: context.amount ?? 0,
    currency: context.currency ?? "",
    userId: context.userId,
    // In the form lists compare them: `email.endsWith('@mailinator.com')` must not miss `Bob@Mailinator.COM`
    // when `email in lists.x` finds it. Here, so that a backtest's stored request goes through it too.
    email: set.readsEmail ? comparedForm("email", context.email ?? "") : "",
    ip: set.readsIp ? comparedForm("ip", context.ip ?? "") : "",
    deviceId: context.deviceId ?? "",
    metadata: set.readsMetadata ? toCel(context.metadata ?? {}) : EMPTY_CEL_MAP,
    signals: set.readsSignals ? toCel(context.signals) : EMPTY_CEL_MAP,
    lists: lists.celValue,
  };
}

/**
 * Converts a JSON-shaped value to CEL values once per decision. Handing
 * @bufbuild/cel a plain object instead would rebuild a Map from it on every
 * field access of every rule.
 */
function toCel(value: unknown): CelInput {
  if (typeof value === "boolean" || typeof value === "number" || typeof value === "string") return value;
  if (Array.isArray(value)) return celList(value.map(toCel));
  if (typeof value === "object" && value !== null) {
    const map = new Map<string, CelInput>();
    // A plain loop: building the Map from mapped entry pairs costs five times as much here.
    for (const [key, item] of Object.entries(value)) map.set(key, toCel(item));
    return celMap(map);
  }
  // null, and undefined or non-JSON values that cannot occur in signals or a Struct.
  return null;
}
