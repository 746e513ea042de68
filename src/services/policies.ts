import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { BacktestWindow, PolicySchema, PolicyService, Rule } from "../../gen/fraud/v1/policy_pb.js";
import { apiError } from "../api/errors.js";
import { codePoints } from "../code-points.js";
import type { Clock } from "../clock.js";
import type { DecisionEngine } from "../decisions/engine.js";
import { definitionOf, type PolicySets } from "../decisions/policy-set.js";
import { newId } from "../ids.js";
import { DEFAULT_POLICY, compilePolicy, formatCompileError, type PolicyDefinition } from "../policies/index.js";
import type { Db } from "../store/database.js";
import { policyContentHash, type PolicyRepository, type StoredPolicy } from "../store/policies.js";
import type { Tenant } from "../store/tenant.js";
import type { AuditActor } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import { callerScope } from "./scope.js";

const DAY_MS = 86_400_000;
const DEFAULT_BACKTEST_DAYS = 7;
const MAX_BACKTEST_DECISIONS = 100_000;
/** A backtest stops here, with what it found so far: the backtest thread is shared by every account. */
const BACKTEST_TIME_LIMIT_MS = 30_000;
const DEFAULT_EXAMPLES = 5;
/**
 * Policies one account and environment may hold: every decision evaluates
 * them, and a change recompiles them all on the request thread.
 */
export const MAX_POLICIES = 200;
/**
 * Characters of conditions one policy may hold together, and one account and
 * environment across its policies that are not disabled. Compiling runs on the
 * request thread, which every account shares, at up to about 9 µs a character
 * on the 2-core development machine (src/policies/shape.ts refuses the shapes
 * that would cost more): about 0.1 s for the largest policy, and up to 2 s for
 * the largest set, compiled again by the first decide after a restart
 * (docs/policies.md, bench/policy-compile.ts).
 */
export const MAX_POLICY_CONDITION_CHARACTERS = 16_384;
export const MAX_ACCOUNT_CONDITION_CHARACTERS = 262_144;

/** Characters as the request's limits count them: code points, so an emoji is one, as in a condition's own limit. */
const conditionCharacters = (rules: ReadonlyArray<{ condition: string }>) => rules.reduce((sum, rule) => sum + codePoints(rule.condition), 0);

/** Refuses a policy whose conditions together pass {@link MAX_POLICY_CONDITION_CHARACTERS}, before anything compiles them. */
function checkConditionSize(rules: ReadonlyArray<{ condition: string }>): void {
  const characters = conditionCharacters(rules);
  if (characters <= MAX_POLICY_CONDITION_CHARACTERS) return;
  const description = `its conditions hold ${characters} characters together, more than the ${MAX_POLICY_CONDITION_CHARACTERS} allowed`;
  throw apiError("VALIDATION_ERROR", `invalid policy: ${description}`, { fieldViolations: [{ field: "rules", description }] });
}

/** The API shape of a policy; the built-in one has no stored timestamps. */
function toPolicy(policy: Omit<StoredPolicy, "status" | "createdAt" | "updatedAt"> & { status: string; createdAt?: number; updatedAt?: number }, builtIn = false): MessageInitShape<typeof PolicySchema> {
  return {
    id: policy.id,
    name: policy.name,
    description: policy.description,
    status: policy.status,
    rules: policy.rules.map((rule) => ({ condition: rule.condition, action: rule.action, description: rule.description ?? "" })),
    actions: [...policy.actions],
    priority: policy.priority,
    version: policy.version,
    builtIn,
    createdAt: policy.createdAt === undefined ? undefined : timestampFromMs(policy.createdAt),
    updatedAt: policy.updatedAt === undefined ? undefined : timestampFromMs(policy.updatedAt),
  };
}

/** The built-in 'Default Thresholds' policy as listed. */
const BUILT_IN_POLICY = toPolicy(
  {
    id: DEFAULT_POLICY.id,
    name: DEFAULT_POLICY.name,
    description: DEFAULT_POLICY.description,
    status: DEFAULT_POLICY.status,
    rules: [...DEFAULT_POLICY.rules],
    actions: [...DEFAULT_POLICY.actions],
    priority: DEFAULT_POLICY.priority,
    version: DEFAULT_POLICY.version,
  },
  true,
);

/**
 * Refuses a policy whose rules do not compile, naming each rule and position.
 * Through the shared cache: the saved policy's first decide then finds it compiled.
 */
function checkCompiles(definition: PolicyDefinition): void {
  const result = compilePolicy(definition);
  if (result.ok) return;
  const fieldViolations = result.errors.map((error) => ({
    field: error.ruleIndex === -1 ? error.field : `rules[${error.ruleIndex}].${error.field}`,
    description: formatCompileError(error),
  }));
  throw apiError("VALIDATION_ERROR", `invalid policy: ${fieldViolations.map((v) => v.description).join("; ")}`, { fieldViolations });
}

/**
 * What a name does not show apart from its letters: white space and separators of every kind (`\s`, Unicode
 * Zs, Zl, Zp), format characters (Cf: zero-width spaces and joiners, direction marks, the soft hyphen), the
 * other characters Unicode says may show nothing (variation selectors, Hangul fillers) and the braille blank.
 */
const UNSEEN_IN_NAMES = /[\s\p{Z}\p{Cf}\p{Default_Ignorable_Code_Point}\u2800]/gu;

/**
 * A name as a reader tells names apart: by its letters alone. Compatibility forms (fullwidth letters, the
 * ideographic space) read as what they show (NFKC), case is folded, and whatever shows no letter is dropped,
 * so `DefaultThresholds` and `Default\u200bThresholds` read as `Default Thresholds`: a space between words is
 * easily missed, in a listing or a dashboard.
 */
const lookalike = (name: string) => name.normalize("NFKC").replace(UNSEEN_IN_NAMES, "").toLowerCase();

interface PolicyFields {
  name: string;
  description: string;
  status: string;
  rules: Rule[];
  actions: string[];
  priority: number;
}

function rulesOf(rules: Rule[]) {
  return rules.map((rule) => ({ condition: rule.condition, action: rule.action, description: rule.description }));
}

/** Policies (part 4.5): CRUD with compile-time checks, versions, and backtests. */
export function createPolicyService(deps: {
  db: Db;
  clock: Clock;
  policies: PolicyRepository;
  sets: PolicySets;
  engine: DecisionEngine;
  audit: AuditTrail;
}): ServiceImpl<typeof PolicyService> {
  const notFound = (id: string) => apiError("NOT_FOUND", `no policy ${id}`);
  const builtInRefusal = () => apiError("CONFLICT", "the built-in 'Default Thresholds' policy cannot be changed or deleted; add a policy with a higher priority instead");

  /** Refuses a change that would put the account's enabled policies past {@link MAX_ACCOUNT_CONDITION_CHARACTERS}. */
  const checkAccountConditions = (tenant: Tenant, policy: StoredPolicy) => {
    if (policy.status === "disabled") return;
    const others = deps.policies.list(tenant).filter((stored) => stored.id !== policy.id && stored.status !== "disabled");
    const characters = others.reduce((sum, stored) => sum + conditionCharacters(stored.rules), conditionCharacters(policy.rules));
    if (characters > MAX_ACCOUNT_CONDITION_CHARACTERS) {
      throw apiError(
        "CONFLICT",
        `this account and environment's enabled policies would hold ${characters} characters of conditions, more than the ${MAX_ACCOUNT_CONDITION_CHARACTERS} allowed; disable or shorten one first`,
      );
    }
  };

  // Each change and its signed audit entry commit together.
  const write = deps.db.transaction((tenant: Tenant, policy: StoredPolicy, isNew: boolean, actor: AuditActor) => {
    // Counted inside the write's transaction, so two creations at once cannot both pass.
    if (isNew && deps.policies.count(tenant) >= MAX_POLICIES) {
      throw apiError("CONFLICT", `this account and environment already hold ${MAX_POLICIES} policies, the most allowed; delete one first`);
    }
    checkAccountConditions(tenant, policy);
    deps.policies.save(tenant, policy, isNew);
    deps.audit.record({
      ...tenant,
      actor,
      action: isNew ? "policy.created" : "policy.updated",
      subject: policy.id,
      data: { version: policy.version, status: policy.status, priority: policy.priority, rules: policy.rules.length, contentHash: policyContentHash(policy) },
    });
  });
  const remove = deps.db.transaction((tenant: Tenant, policy: StoredPolicy, actor: AuditActor) => {
    deps.policies.delete(tenant, policy.id);
    deps.audit.record({ ...tenant, actor, action: "policy.deleted", subject: policy.id, data: { version: policy.version } });
  });

  const save = (ctx: HandlerContext, fields: PolicyFields, existing: StoredPolicy | undefined): StoredPolicy => {
    const { tenant, actor } = callerScope(ctx.values);
    // Listed beside the built-in policy, a namesake would be taken for it: also one differing in case, spaces or
    // characters that show nothing.
    if (lookalike(fields.name) === lookalike(DEFAULT_POLICY.name)) {
      throw apiError("VALIDATION_ERROR", `invalid policy: '${DEFAULT_POLICY.name}' is the built-in policy's name`, {
        fieldViolations: [{ field: "name", description: "is the built-in policy's name" }],
      });
    }
    const now = deps.clock.now();
    const policy: StoredPolicy = {
      id: existing?.id ?? newId("pol"),
      name: fields.name,
      description: fields.description,
      // A new policy is tried in shadow before it acts (docs/api-decisions.md).
      status: (fields.status || "shadow") as StoredPolicy["status"],
      rules: rulesOf(fields.rules),
      actions: fields.actions,
      priority: fields.priority,
      version: (existing?.version ?? 0) + 1,
      createdAt: existing?.createdAt ?? now,
      updatedAt: now,
    };
    // The sizes first, so that a policy too large costs no compile; the account's total again in the write.
    checkConditionSize(policy.rules);
    checkAccountConditions(tenant, policy);
    checkCompiles(definitionOf(policy));
    write.immediate(tenant, policy, existing === undefined, actor);
    deps.sets.invalidate(tenant);
    return policy;
  };

  const backtest = async (ctx: HandlerContext, candidate: PolicyDefinition, window: BacktestWindow | undefined) => {
    const { tenant } = callerScope(ctx.values);
    const now = deps.clock.now();
    const toMs = window?.to ? timestampMs(window.to) : now;
    const fromMs = window?.from ? timestampMs(window.from) : toMs - DEFAULT_BACKTEST_DAYS * DAY_MS;
    if (fromMs >= toMs) {
      throw apiError("VALIDATION_ERROR", "window.from must be before window.to", { fieldViolations: [{ field: "window.from", description: "must be before window.to" }] });
    }
    const outcome = await deps.engine.backtest({
      tenant,
      candidate,
      fromMs,
      toMs,
      maxDecisions: window?.maxDecisions ?? MAX_BACKTEST_DECISIONS,
      maxExamples: window?.maxExamples ?? DEFAULT_EXAMPLES,
      nowMs: now,
      timeLimitMs: BACKTEST_TIME_LIMIT_MS,
    });
    return { result: outcome };
  };

  return {
    listPolicies(_request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const stored = deps.policies.list(tenant).map((policy) => toPolicy(policy));
      // The built-in policy has the lowest priority: it is listed last, as it is evaluated.
      return { policies: [...stored, BUILT_IN_POLICY] };
    },
    createPolicy(request, ctx) {
      return { policy: toPolicy(save(ctx, request, undefined)) };
    },
    getPolicy(request, ctx) {
      if (request.id === DEFAULT_POLICY.id) return { policy: BUILT_IN_POLICY };
      const stored = deps.policies.get(callerScope(ctx.values).tenant, request.id);
      if (!stored) throw notFound(request.id);
      return { policy: toPolicy(stored) };
    },
    getPolicyVersion(request, ctx) {
      // The built-in policy has one version, never changed.
      if (request.id === DEFAULT_POLICY.id && request.version === DEFAULT_POLICY.version) return { policy: BUILT_IN_POLICY };
      const saved = deps.policies.atVersion(callerScope(ctx.values).tenant, request.id, request.version);
      if (!saved) throw apiError("NOT_FOUND", `no version ${request.version} of policy ${request.id}`);
      return { policy: toPolicy(saved) };
    },
    updatePolicy(request, ctx) {
      if (request.id === DEFAULT_POLICY.id) throw builtInRefusal();
      const existing = deps.policies.get(callerScope(ctx.values).tenant, request.id);
      if (!existing) throw notFound(request.id);
      // Read, checked and saved without a pause (handlers run one at a time): nothing can save in between.
      if (request.version !== undefined && request.version !== existing.version) {
        // A version above the current one was never read from this policy: nobody saved it since, the
        // caller took the number from elsewhere (another policy, another environment, its own count).
        const why = request.version < existing.version ? "it was saved since" : `it has no version ${request.version} yet`;
        throw apiError(
          "CONFLICT",
          `policy ${request.id} is at version ${existing.version}, not ${request.version}: ${why}; read it again and apply your change to that version`,
        );
      }
      return { policy: toPolicy(save(ctx, request, existing)) };
    },
    deletePolicy(request, ctx) {
      if (request.id === DEFAULT_POLICY.id) throw builtInRefusal();
      const { tenant, actor } = callerScope(ctx.values);
      const existing = deps.policies.get(tenant, request.id);
      if (!existing) throw notFound(request.id);
      remove.immediate(tenant, existing, actor);
      deps.sets.invalidate(tenant);
      return {};
    },
    async backtestPolicy(request, ctx) {
      if (request.id === DEFAULT_POLICY.id) return backtest(ctx, DEFAULT_POLICY, request.window);
      const stored = deps.policies.get(callerScope(ctx.values).tenant, request.id);
      if (!stored) throw notFound(request.id);
      const candidate = definitionOf(stored);
      // Saved when it compiled; a later release can refuse what an earlier one took (a new limit). Not the
      // caller's request at fault: the stored policy needs an update before it can be replayed.
      const compiled = compilePolicy(candidate);
      if (!compiled.ok) {
        throw apiError("CONFLICT", `policy ${stored.id} no longer compiles and must be updated first: ${compiled.errors.map(formatCompileError).join("; ")}`);
      }
      return backtest(ctx, candidate, request.window);
    },
    async backtestDraftPolicy(request, ctx) {
      const now = deps.clock.now();
      const draft = definitionOf({
        id: "pol_draft",
        version: 1,
        status: "active",
        priority: request.priority,
        actions: request.actions,
        rules: rulesOf(request.rules),
        createdAt: now,
      });
      checkConditionSize(draft.rules);
      checkCompiles(draft);
      return backtest(ctx, draft, request.window);
    },
  };
}
