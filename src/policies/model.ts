// Shapes shared by compilation and evaluation. The definitions are
// structural subsets of the generated fraud.v1 Policy and Rule messages, so a
// stored or received policy can be compiled as it is.

import type { CelInput, CelResult } from "@bufbuild/cel";

/**
 * What a matching rule does. allow, challenge and deny become the decision;
 * review challenges the end user and asks the caller to open a case for an
 * analyst whatever the score (docs/policies.md).
 */
export type RuleAction = "allow" | "challenge" | "deny" | "review";
export const RULE_ACTIONS: readonly RuleAction[] = ["allow", "challenge", "deny", "review"];

export type PolicyStatus = "active" | "shadow" | "disabled";
export const POLICY_STATUSES: readonly PolicyStatus[] = ["active", "shadow", "disabled"];

export interface RuleDefinition {
  readonly condition: string;
  readonly action: string;
  readonly description?: string;
}

export interface PolicyDefinition {
  readonly id: string;
  readonly version: number;
  readonly status: string;
  readonly priority: number;
  /** Request actions (login, checkout, ...) the policy applies to; empty means all. */
  readonly actions: readonly string[];
  readonly rules: readonly RuleDefinition[];
  readonly builtIn?: boolean;
  readonly createdAt?: { readonly seconds: bigint; readonly nanos: number } | undefined;
}

/** A planned CEL program; bindings are the condition's variables as CEL values. */
export type Program = (bindings: Readonly<Record<string, CelInput>>) => CelResult;

export interface CompiledRule {
  readonly index: number;
  readonly condition: string;
  readonly action: RuleAction;
  readonly description: string;
  readonly program: Program;
  readonly listNames: readonly string[];
  /** The variables the condition reads (checker.ts). */
  readonly variables: readonly string[];
}

export interface CompiledPolicy {
  readonly id: string;
  readonly version: number;
  readonly status: PolicyStatus;
  readonly priority: number;
  /** Empty means every action. */
  readonly actions: ReadonlySet<string>;
  readonly builtIn: boolean;
  /** Milliseconds since the epoch; null when unknown (sorts after known times). */
  readonly createdAtMs: number | null;
  readonly rules: readonly CompiledRule[];
}

export interface SourcePosition {
  /** UTF-16 offset into the condition as written, from 0. */
  readonly offset: number;
  /** From 1. */
  readonly line: number;
  /** From 1. */
  readonly column: number;
}

export interface PolicyCompileError {
  /** Index of the rule in the policy; -1 for a policy-level problem (status). */
  readonly ruleIndex: number;
  /** What is wrong: the policy's status, or a rule's action or condition. */
  readonly field: "status" | "action" | "condition";
  /** Where in the condition; null for problems outside it, or when the parser gives none. */
  readonly position: SourcePosition | null;
  readonly message: string;
}

export type CompileResult =
  | { readonly ok: true; readonly policy: CompiledPolicy }
  | { readonly ok: false; readonly errors: readonly PolicyCompileError[] };
