import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  DEFAULT_POLICY,
  ListSnapshot,
  compilePolicy,
  evaluatePolicies,
  formatCompileError,
  type CompileResult,
  type CompiledPolicy,
  type EvaluationBudget,
  type EvaluationContext,
  type ListKind,
  type PolicyDefinition,
  type PolicyEvaluation,
} from "../policies/index.js";
import type { ListRepository } from "../store/lists.js";
import type { PolicyRepository, StoredPolicy } from "../store/policies.js";
import type { Tenant } from "../store/tenant.js";

/** A tenant's policies, compiled, with their names and the live list entries. */
export interface TenantPolicies {
  compiled: CompiledPolicy[];
  /** The active ones, the built-in thresholds included: what analyze evaluates. */
  active: CompiledPolicy[];
  /** Whether any active policy is the account's own: without one, the score alone decides. */
  hasOwnActive: boolean;
  byId: Map<string, { name: string; compiled: CompiledPolicy }>;
  lists: ListSnapshot;
  /** The deny lists (name and entry kind), for the engine's denylisted signal. */
  denyLists: Array<{ name: string; kind: ListKind }>;
}

interface CacheEntry {
  policies: TenantPolicies;
  /** The snapshot is rebuilt when the earliest list entry expires. */
  validUntil: number;
}

/** A stored policy in the shape the compiler takes. */
export function definitionOf(policy: Pick<StoredPolicy, "id" | "version" | "status" | "priority" | "actions" | "rules" | "createdAt">): PolicyDefinition {
  return {
    id: policy.id,
    version: policy.version,
    status: policy.status,
    priority: policy.priority,
    actions: policy.actions,
    rules: policy.rules,
    builtIn: false,
    createdAt: timestampFromMs(policy.createdAt),
  };
}

/** What a decision's inputs look like to the policies (the lists come from the tenant's set). */
export type PolicyInputs = Omit<EvaluationContext, "lists">;

/** A stored policy that no longer compiles, as {@link PolicySets} reports it. */
export interface SkippedPolicy {
  tenant: Tenant;
  policyId: string;
  version: number;
  name: string;
  errors: string;
}

/** Per phase (active policies, then shadow ones): a thousand times what 25 rules take (about 23 µs, docs/benchmarks.md). */
const POLICY_BUDGET_MS = 25;

/** Exhausted once `ms` of wall time have passed since it was made. */
class TimeBudget implements EvaluationBudget {
  private readonly until: number;

  constructor(ms: number) {
    this.until = performance.now() + ms;
  }

  exhausted(): boolean {
    return performance.now() > this.until;
  }
}

/**
 * Compiled policies and list snapshots per tenant, built on first use and
 * dropped when a policy or list changes (or an entry expires), so a decision
 * costs one map lookup and the rules' evaluation. Live decisions and their
 * shadow evaluation go through `evaluate`, backtests through `replay`: the
 * same evaluation, without the time budget.
 */
export class PolicySets {
  private readonly cache = new Map<string, CacheEntry>();

  /**
   * `onSkipped` hears of each stored policy that no longer compiles (saved
   * before a limit it breaks existed), once per rebuild of the tenant's set:
   * decisions go on without it, and somebody should know.
   */
  constructor(
    private readonly policies: PolicyRepository,
    private readonly lists: ListRepository,
    private readonly onSkipped: (skipped: SkippedPolicy) => void = () => undefined,
  ) {}

  forTenant(tenant: Tenant, now: number, candidate?: PolicyDefinition): TenantPolicies {
    const key = `${tenant.accountId}/${tenant.environment}`;
    const cached = candidate ? undefined : this.cache.get(key);
    if (cached && now < cached.validUntil) return cached.policies;
    // What the tenant's last set compiled: a stored version is never changed, so it is reused as it is.
    const earlier = cached?.policies.byId;

    const stored = this.policies.list(tenant);
    const definitions: Array<{ name: string; definition: PolicyDefinition }> = [
      { name: DEFAULT_POLICY.name, definition: DEFAULT_POLICY },
      // Disabled policies are never evaluated: they cost no compile on the thread that answers requests.
      ...stored.filter((policy) => policy.id !== candidate?.id && policy.status !== "disabled").map((policy) => ({ name: policy.name, definition: definitionOf(policy) })),
    ];
    if (candidate) definitions.push({ name: "(candidate)", definition: candidate });
    const byId = new Map<string, { name: string; compiled: CompiledPolicy }>();
    for (const { name, definition } of definitions) {
      // Not through the shared cache alone: other accounts' saves could have pushed it out, and then one
      // change of this account's would compile all its policies again on the thread every account shares.
      const kept = earlier?.get(definition.id)?.compiled;
      const result: CompileResult = kept !== undefined && kept.version === definition.version ? { ok: true, policy: kept } : compilePolicy(definition);
      // Stored policies were checked when saved; one that no longer compiles is skipped, never fatal.
      if (result.ok) byId.set(definition.id, { name, compiled: result.policy });
      else if (definition === candidate) throw new Error(result.errors.map(formatCompileError).join("; "));
      else this.onSkipped({ tenant, policyId: definition.id, version: definition.version, name, errors: result.errors.map(formatCompileError).join("; ") });
    }

    const storedLists = this.lists.list(tenant, now);
    const kinds = new Map(storedLists.map((list) => [list.name, list.kind]));
    let validUntil = Number.POSITIVE_INFINITY;
    const definitionsOfLists = [...this.lists.liveEntries(tenant, now)].map(([name, entries]) => {
      for (const entry of entries) if (entry.expiresAt !== undefined) validUntil = Math.min(validUntil, entry.expiresAt);
      return { name, kind: kinds.get(name) ?? "user", entries: entries.map((entry) => entry.value) };
    });
    // Lists without entries still exist for rules that name them.
    for (const [name, kind] of kinds) if (!definitionsOfLists.some((list) => list.name === name)) definitionsOfLists.push({ name, kind, entries: [] });

    const compiled = [...byId.values()].map((entry) => entry.compiled);
    const active = compiled.filter((policy) => policy.status === "active");
    const policies: TenantPolicies = {
      compiled,
      active,
      hasOwnActive: active.some((policy) => !policy.builtIn),
      byId,
      lists: ListSnapshot.build(definitionsOfLists),
      denyLists: storedLists.filter((list) => list.type === "deny").map((list) => ({ name: list.name, kind: list.kind })),
    };
    if (!candidate) this.cache.set(key, { policies, validUntil });
    return policies;
  }

  /** Rebuilds the tenant's set on its next use, compiling only the policies that changed. */
  invalidate(tenant: Tenant): void {
    const cached = this.cache.get(`${tenant.accountId}/${tenant.environment}`);
    if (cached) cached.validUntil = Number.NEGATIVE_INFINITY;
  }

  /**
   * A decision's evaluation, within {@link POLICY_BUDGET_MS} of the request
   * thread's time: each rule's cost is bounded when it is saved, but an account
   * may hold many rules, and every other account's requests wait meanwhile.
   */
  evaluate(policies: TenantPolicies, inputs: PolicyInputs): PolicyEvaluation {
    return evaluatePolicies(policies.compiled, { ...inputs, lists: policies.lists }, () => new TimeBudget(POLICY_BUDGET_MS));
  }

  /**
   * Analyze's evaluation: the active policies only, within the same budget. Shadow policies are tried on
   * decides, whose results are recorded and sent; an analysis keeps no record to show them in.
   */
  evaluateActive(policies: TenantPolicies, inputs: PolicyInputs): PolicyEvaluation {
    return evaluatePolicies(policies.active, { ...inputs, lists: policies.lists }, () => new TimeBudget(POLICY_BUDGET_MS));
  }

  /** A stored decision evaluated again (backtests, in a thread of their own): every rule, whatever the time. */
  replay(policies: TenantPolicies, inputs: PolicyInputs): PolicyEvaluation {
    return evaluatePolicies(policies.compiled, { ...inputs, lists: policies.lists });
  }
}
