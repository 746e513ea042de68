import { describe, expect, it } from "vitest";
import { decideFromScore } from "../../src/engine/score.js";
import {
  BUDGET_EXHAUSTED,
  DEFAULT_POLICY,
  ListSnapshot,
  compilePolicyUncached,
  evaluatePolicies,
} from "../../src/policies/index.js";
import type { CompiledPolicy, PolicyDefinition, RuleDefinition } from "../../src/policies/index.js";
import { context, policy } from "./fixtures.js";

function compile(definition: PolicyDefinition): CompiledPolicy {
  const result = compilePolicyUncached(definition);
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.policy;
}

const rule = (condition: string, action: RuleDefinition["action"] = "deny"): RuleDefinition => ({ condition, action });
const defaultPolicy = compile(DEFAULT_POLICY);

describe("the built-in Default Thresholds policy", () => {
  it("is active, lowest priority, with the specification's two rules", () => {
    expect(DEFAULT_POLICY).toMatchObject({
      name: "Default Thresholds",
      status: "active",
      builtIn: true,
      actions: [],
      rules: [
        { condition: "score >= 70", action: "deny", description: "deny when score is at least 70" },
        {
          condition: "score >= 30 AND score < 70",
          action: "challenge",
          description: "challenge when score is at least 30 and below 70",
        },
      ],
    });
  });

  it("decides exactly like decideFromScore for every score 0..100", () => {
    for (let score = 0; score <= 100; score++) {
      const evaluation = evaluatePolicies([defaultPolicy], context({ score }));
      expect(evaluation.decision, `score ${score}`).toBe(decideFromScore(score));
    }
  });

  it("names the rule that decided, or the score when none matched", () => {
    expect(evaluatePolicies([defaultPolicy], context({ score: 85 })).decidedBy).toMatchObject({
      policyId: DEFAULT_POLICY.id,
      ruleIndex: 0,
      action: "deny",
    });
    expect(evaluatePolicies([defaultPolicy], context({ score: 45 })).decidedBy).toMatchObject({ ruleIndex: 1 });
    const low = evaluatePolicies([defaultPolicy], context({ score: 5 }));
    expect(low.decidedBy).toBeNull();
    expect(low.results).toEqual([
      { policyId: DEFAULT_POLICY.id, version: 1, mode: "active", matchedRule: -1, action: null, errors: [] },
    ]);
  });

  it("falls back to the score when there are no policies at all", () => {
    expect(evaluatePolicies([], context({ score: 75 }))).toMatchObject({ decision: "deny", decidedBy: null, results: [] });
  });
});

describe("precedence", () => {
  it("evaluates higher priority first, whatever the input order", () => {
    const low = compile(policy([rule("score > 10", "deny")], { priority: 1 }));
    const high = compile(policy([rule("score > 10", "allow")], { priority: 5 }));
    for (const order of [[low, high], [high, low]]) {
      const evaluation = evaluatePolicies(order, context({ score: 50 }));
      expect(evaluation.decision).toBe("allow");
      expect(evaluation.decidedBy?.policyId).toBe(high.id);
      // The lower policy is not evaluated once a higher one decided.
      expect(evaluation.results.map((result) => result.policyId)).toEqual([high.id]);
    }
  });

  it("breaks priority ties by creation time, then id", () => {
    const at = (seconds: number) => ({ seconds: BigInt(seconds), nanos: 0 });
    const older = compile(policy([rule("true", "deny")], { id: "pol_b", createdAt: at(100) }));
    const newer = compile(policy([rule("true", "allow")], { id: "pol_a", createdAt: at(200) }));
    expect(evaluatePolicies([newer, older], context()).decidedBy?.policyId).toBe("pol_b");
    const undatedA = compile(policy([rule("true", "allow")], { id: "pol_a" }));
    const undatedB = compile(policy([rule("true", "deny")], { id: "pol_b" }));
    expect(evaluatePolicies([undatedB, undatedA], context()).decidedBy?.policyId).toBe("pol_a");
    expect(evaluatePolicies([undatedA, older], context()).decidedBy?.policyId).toBe("pol_b");
  });

  it("puts custom policies before the built-in one at its priority", () => {
    const custom = compile(policy([rule("score >= 70", "review")], { priority: DEFAULT_POLICY.priority }));
    expect(evaluatePolicies([defaultPolicy, custom], context({ score: 90 })).decidedBy?.policyId).toBe(custom.id);
  });

  it("takes the first matching rule within a policy", () => {
    const ordered = compile(policy([rule("score > 90", "deny"), rule("score > 50", "challenge"), rule("true", "allow")]));
    expect(evaluatePolicies([ordered], context({ score: 95 })).decision).toBe("deny");
    expect(evaluatePolicies([ordered], context({ score: 60 })).decidedBy?.ruleIndex).toBe(1);
    expect(evaluatePolicies([ordered], context({ score: 60 })).results[0]).toMatchObject({ matchedRule: 1, action: "challenge" });
  });

  it("moves on to the next policy when no rule of a policy matches", () => {
    const none = compile(policy([rule("score > 99")], { priority: 10 }));
    const evaluation = evaluatePolicies([none, defaultPolicy], context({ score: 40 }));
    expect(evaluation.decision).toBe("challenge");
    expect(evaluation.results.map((result) => [result.policyId, result.matchedRule])).toEqual([
      [none.id, -1],
      [DEFAULT_POLICY.id, 1],
    ]);
  });

  it("applies a policy only to the actions it names; empty means all", () => {
    const checkoutOnly = compile(policy([rule("amount > 1000", "deny")], { actions: ["checkout", "purchase"], priority: 10 }));
    expect(evaluatePolicies([checkoutOnly, defaultPolicy], context({ action: "checkout", amount: 5000 })).decision).toBe("deny");
    const login = evaluatePolicies([checkoutOnly, defaultPolicy], context({ action: "login", amount: 5000 }));
    expect(login.decision).toBe("allow");
    expect(login.results.map((result) => result.policyId)).toEqual([DEFAULT_POLICY.id]);
  });

  it("skips disabled policies entirely", () => {
    const disabled = compile(policy([rule("true", "deny")], { status: "disabled", priority: 10 }));
    const evaluation = evaluatePolicies([disabled, defaultPolicy], context({ score: 5 }));
    expect(evaluation.decision).toBe("allow");
    expect([...evaluation.results, ...evaluation.shadowResults].map((result) => result.policyId)).toEqual([DEFAULT_POLICY.id]);
  });

  it("lets an allow-list rule in a higher-priority policy override a high score", () => {
    const lists = ListSnapshot.build([
      { name: "vip_users", kind: "user", entries: ["user_4821"] },
      { name: "office_ips", kind: "ip", entries: ["81.2.69.0/24"] },
    ]);
    const allowList = compile(
      policy([rule("userId in lists.vip_users", "allow"), rule("ip in lists.office_ips AND score < 95", "allow")], {
        priority: 1000,
      }),
    );
    const vip = evaluatePolicies([defaultPolicy, allowList], context({ score: 97, lists }));
    expect(vip).toMatchObject({ decision: "allow", decidedBy: { policyId: allowList.id, ruleIndex: 0 } });
    const office = evaluatePolicies([defaultPolicy, allowList], context({ score: 90, userId: "other", lists }));
    expect(office).toMatchObject({ decision: "allow", decidedBy: { ruleIndex: 1 } });
    const stranger = evaluatePolicies([defaultPolicy, allowList], context({ score: 97, userId: "other", lists }));
    expect(stranger).toMatchObject({ decision: "deny", decidedBy: { policyId: DEFAULT_POLICY.id } });
  });

  it("maps review to a challenge and asks for a case", () => {
    const review = compile(policy([rule("signals.history.newDevice AND amount > 500", "review")], { priority: 10 }));
    const signals = context().signals;
    signals.history.newDevice = true;
    const evaluation = evaluatePolicies([review, defaultPolicy], context({ signals, amount: 800, score: 10 }));
    expect(evaluation).toMatchObject({ decision: "challenge", review: true, decidedBy: { action: "review" } });
    expect(evaluatePolicies([review, defaultPolicy], context({ score: 10 })).review).toBe(false);
  });
});

describe("shadow policies", () => {
  it("are evaluated but never change the decision", () => {
    const shadowDeny = compile(policy([rule("score > 5", "deny")], { status: "shadow", priority: 500 }));
    const shadowAllow = compile(policy([rule("true", "allow")], { status: "shadow", priority: 400 }));
    for (const score of [0, 20, 50, 90]) {
      const withShadow = evaluatePolicies([shadowDeny, shadowAllow, defaultPolicy], context({ score }));
      const without = evaluatePolicies([defaultPolicy], context({ score }));
      expect(withShadow.decision).toBe(without.decision);
      expect(withShadow.decidedBy).toEqual(without.decidedBy);
      expect(withShadow.results).toEqual(without.results);
    }
  });

  it("are returned separately, even below the deciding policy", () => {
    const deciding = compile(policy([rule("true", "deny")], { priority: 100 }));
    const shadowBelow = compile(policy([rule("score > 5", "challenge")], { status: "shadow", priority: 1 }));
    const shadowMiss = compile(policy([rule("score > 99", "deny")], { status: "shadow", priority: 2 }));
    const scoped = compile(policy([rule("true", "deny")], { status: "shadow", actions: ["signup"] }));
    const evaluation = evaluatePolicies([shadowBelow, deciding, shadowMiss, scoped], context({ score: 10 }));
    expect(evaluation.decidedBy?.policyId).toBe(deciding.id);
    expect(evaluation.shadowResults).toEqual([
      { policyId: shadowMiss.id, version: 1, mode: "shadow", matchedRule: -1, action: null, errors: [] },
      { policyId: shadowBelow.id, version: 1, mode: "shadow", matchedRule: 0, action: "challenge", errors: [] },
    ]);
  });
});

describe("run-time failures", () => {
  it("are recorded on the policy's result, count as no match, and never throw", () => {
    const failing = compile(
      policy(
        [
          rule("score / (amount - amount) > 1", "deny"),
          rule("metadata.tier == 'gold'", "deny"),
          rule("signals.amount.value > 100", "deny"),
          rule("metadata.flag", "deny"),
          rule("score < 50", "challenge"),
        ],
        { priority: 10 },
      ),
    );
    const evaluation = evaluatePolicies([failing, defaultPolicy], context({ score: 20, metadata: { flag: "yes" } }));
    expect(evaluation.decision).toBe("challenge");
    expect(evaluation.results[0]).toMatchObject({ matchedRule: 4, action: "challenge" });
    expect(evaluation.results[0]?.errors.map((error) => error.ruleIndex)).toEqual([0, 1, 2, 3]);
    expect(evaluation.results[0]?.errors[0]?.message).toBe("division by zero");
    expect(evaluation.results[0]?.errors[1]?.message).toMatch(/tier/);
    expect(evaluation.results[0]?.errors[3]?.message).toBe("condition evaluated to a string, not a boolean");
  });

  it("let the score decide when every rule fails", () => {
    const failing = compile(policy([rule("metadata.missing == 1", "allow")], { priority: 10 }));
    const evaluation = evaluatePolicies([failing, defaultPolicy], context({ score: 80 }));
    expect(evaluation).toMatchObject({ decision: "deny", decidedBy: { policyId: DEFAULT_POLICY.id } });
    expect(evaluation.results[0]?.errors).toHaveLength(1);
  });

  it("follow CEL short-circuiting, so a guard avoids the error", () => {
    const guarded = compile(policy([rule("signals.amount.value != null AND signals.amount.value > 100")]));
    const evaluation = evaluatePolicies([guarded], context());
    expect(evaluation.results[0]).toMatchObject({ matchedRule: -1, errors: [] });
  });
});

describe("purity", () => {
  it("gives the same answer for the same inputs, so backtests replay live decisions", () => {
    const policies = [
      compile(policy([rule("signals.velocity.burst", "deny")], { priority: 3 })),
      compile(policy([rule("score > 40", "review")], { status: "shadow" })),
      defaultPolicy,
    ];
    const stored = JSON.parse(JSON.stringify(context({ score: 55, metadata: { a: 1 } })));
    const first = evaluatePolicies(policies, stored);
    const replay = evaluatePolicies(policies, structuredClone(stored));
    expect(replay).toEqual(first);
  });
});

describe("bindings", () => {
  it("knows which variables each rule reads, comprehension variables aside", () => {
    const compiled = compile(
      policy([
        rule("score >= 90"),
        rule("signals.network.tor AND amount > 100"),
        rule("metadata.channel == 'web' AND userId in lists.vip"),
        rule("[1, 2].exists(x, x > 1) || [1, 2].all(n, n > score)"),
      ]),
    );
    expect(compiled.rules.map((r) => [...r.variables].sort())).toEqual([
      ["score"],
      ["amount", "signals"],
      ["lists", "metadata", "userId"],
      ["score"],
    ]);
  });

  it("evaluates rules over signals and metadata only when some rule reads them, with the same outcome", () => {
    const scoreOnly = compile(policy([rule("score >= 50")]));
    const torRule = compile(policy([rule("signals.network.tor", "review")], { priority: 5 }));
    const tor = context({ score: 20 });
    expect(evaluatePolicies([scoreOnly, defaultPolicy], tor).decision).toBe("allow");
    expect(evaluatePolicies([scoreOnly, torRule, defaultPolicy], { ...tor, signals: { ...tor.signals, network: { ...tor.signals.network, tor: true } } })).toMatchObject({
      decision: "challenge",
      review: true,
    });
  });
});

describe("the e-mail and address rules read", () => {
  const matched = (condition: string, overrides: Parameters<typeof context>[0], lists = ListSnapshot.EMPTY) =>
    evaluatePolicies([compile(policy([rule(condition)]))], { ...context(overrides), lists }).results[0]?.matchedRule === 0;

  it("are the e-mail as e-mail lists compare it: trimmed and lower-cased, its domain in one spelling", () => {
    const lists = ListSnapshot.build([{ name: "throwaway", kind: "email", entries: ["bob@mailinator.com"] }]);
    for (const email of ["Bob@Mailinator.COM", " bob@mailinator.com ", "bob@MAILINATOR.com."]) {
      expect(matched("email.endsWith('@mailinator.com')", { email }), email).toBe(true);
      expect(matched("email == 'bob@mailinator.com'", { email }), email).toBe(true);
      expect(matched("email in lists.throwaway", { email }, lists), email).toBe(true);
    }
    expect(matched("email == 'hans@münchen.de'", { email: "Hans@xn--mnchen-3ya.de" })).toBe(true);
    // None is "", as before.
    expect(matched("email == ''", { email: undefined })).toBe(true);
  });

  it("are the address in canonical form, as IP lists and signals.network.ip compare it", () => {
    const lists = ListSnapshot.build([
      { name: "office", kind: "ip", entries: ["2a00:1450:4002:81c::1", "10.0.0.1"] },
      { name: "nat64", kind: "ip", entries: ["64:ff9b::/96"] },
    ]);
    for (const ip of ["2A00:1450:4002:081C:0:0:0:1", "2a00:1450:4002:81c:0::1", " 2a00:1450:4002:81c::1"]) {
      expect(matched("ip == '2a00:1450:4002:81c::1'", { ip }), ip).toBe(true);
      expect(matched("ip in lists.office", { ip }, lists), ip).toBe(true);
    }
    expect(matched("ip == '10.0.0.1'", { ip: "::FFFF:10.0.0.1" })).toBe(true);
    // A NAT64 address stays itself, so a range over the prefix still holds it; its client's entries match it too.
    expect(matched("ip == '64:ff9b::a00:1'", { ip: "64:FF9B::10.0.0.1" })).toBe(true);
    expect(matched("ip in lists.nat64 && ip in lists.office", { ip: "64:ff9b::10.0.0.1" }, lists)).toBe(true);
    // Text that is no address (a replayed request from before the field was checked) stays as given.
    expect(matched("ip == 'unknown'", { ip: "unknown" })).toBe(true);
  });

  it("keep that form in a rule that reads other variables too, from a context stored as JSON as backtests read it", () => {
    const policies = [compile(policy([rule("score > 90 || (signals.network.tor && size(metadata) > 9) || email.startsWith('bob@') || ip == '10.0.0.1'")]))];
    const stored = JSON.parse(JSON.stringify(context({ email: "BOB@example.com", ip: "::ffff:10.0.0.1" }))) as ReturnType<typeof context>;
    expect(evaluatePolicies(policies, stored).results[0]?.matchedRule).toBe(0);
    expect(evaluatePolicies(policies, { ...stored, email: "Ann@example.com" }).results[0]?.matchedRule).toBe(0);
    expect(evaluatePolicies(policies, { ...stored, email: "Ann@example.com", ip: "10.0.0.2" }).results[0]?.matchedRule).toBe(-1);
  });
});

describe("metadata values", () => {
  it("keep their JSON types: across types == is silently unequal, ordering is an error (docs/policies.md)", () => {
    const outcome = (condition: string) => {
      const result = evaluatePolicies([compile(policy([rule(condition)]))], context({ metadata: { n: "5", flag: "true", big: "12" } })).results[0];
      return { matched: result?.matchedRule === 0, errors: result?.errors.length };
    };
    expect(outcome("metadata.n == 5")).toEqual({ matched: false, errors: 0 });
    expect(outcome("metadata.flag == true")).toEqual({ matched: false, errors: 0 });
    expect(outcome("metadata.n != 5")).toEqual({ matched: true, errors: 0 });
    expect(outcome("metadata.n > 3")).toEqual({ matched: false, errors: 1 });
    expect(outcome("metadata.big > '3'")).toEqual({ matched: false, errors: 0 });
    expect(outcome("metadata.n == '5'")).toEqual({ matched: true, errors: 0 });
    expect(outcome("metadata.flag == 'true'")).toEqual({ matched: true, errors: 0 });
    expect(outcome("metadata.n == 5 OR metadata.n == '5'")).toEqual({ matched: true, errors: 0 });
    for (const conversion of ["int(metadata.n) > 3", "double(metadata.n) > 3", "string(metadata.n) == '5'", "metadata.n in [5, '5']"]) {
      expect(compilePolicyUncached(policy([rule(conversion)])).ok, conversion).toBe(false);
    }
  });
});

describe("what a shadow policy would have decided", () => {
  it("is its action when it matches above the deciding policy, and the live decision otherwise", () => {
    const vip = compile(policy([rule("userId == 'vip'", "allow")], { priority: 200 }));
    const high = compile(policy([rule("score > 50", "challenge")], { priority: 300, status: "shadow" }));
    const below = compile(policy([rule("score > 50", "challenge")], { priority: 100, status: "shadow" }));
    const missing = compile(policy([rule("userId == 'nobody'", "deny")], { priority: 300, status: "shadow" }));
    const evaluation = evaluatePolicies([vip, high, below, missing, defaultPolicy], context({ score: 93, userId: "vip" }));
    expect(evaluation.decision).toBe("allow");
    // In the order of shadowResults: high (matches above the vip rule), missing (no match), below (under it).
    expect(evaluation.shadowResults.map((r) => r.policyId)).toEqual([high.id, missing.id, below.id]);
    expect(evaluation.shadowDecisions).toEqual(["challenge", "allow", "allow"]);
  });
});

describe("the evaluation budget", () => {
  /** A budget that runs out after `rules` checks, as a clock would after so much time. */
  const budgetOf = (rules: number) => {
    let checks = 0;
    return { exhausted: () => ++checks > rules };
  };

  it("stops at the rule it runs out on: the rest count as not matched, each policy saying why", () => {
    const first = compile(policy([rule("score > 90", "deny"), rule("score > 80", "deny"), rule("score > 10", "deny")], { priority: 20 }));
    const shadow = compile(policy([rule("score > 10", "challenge")], { priority: 15, status: "shadow" }));
    const evaluation = evaluatePolicies([first, shadow, defaultPolicy], context({ score: 50 }), () => budgetOf(2));
    // The third rule of the first policy would have denied; it and everything after are cut off.
    expect(evaluation.results.map((r) => [r.matchedRule, r.errors])).toEqual([
      [-1, [{ ruleIndex: 2, message: BUDGET_EXHAUSTED }]],
      [-1, [{ ruleIndex: 0, message: BUDGET_EXHAUSTED }]],
    ]);
    // The shadow policy has a budget of its own.
    expect(evaluation.shadowResults[0]).toMatchObject({ matchedRule: 0, errors: [] });
    // No active policy matched: the score decides, as when every rule fails.
    expect(evaluation.decision).toBe(decideFromScore(50));
    expect(evaluation.decidedBy).toBeNull();
  });

  it("changes nothing while it lasts, and replays pass none", () => {
    const policies = [compile(policy([rule("score > 90"), rule("score > 10")], { priority: 20 })), defaultPolicy];
    const unbounded = evaluatePolicies(policies, context({ score: 50 }));
    expect(evaluatePolicies(policies, context({ score: 50 }), () => budgetOf(100))).toEqual(unbounded);
    expect(unbounded.decidedBy?.ruleIndex).toBe(1);
  });

  it("gives shadow policies a budget of their own: a slow one, however high its priority, never cuts off an active rule", () => {
    const slowShadow = compile(policy([rule("score > 99"), rule("score > 98"), rule("score > 97")], { priority: 500, status: "shadow" }));
    const deny = compile(policy([rule("userId == 'blocked'", "deny")], { priority: 100 }));
    const evaluation = evaluatePolicies([slowShadow, deny, defaultPolicy], context({ score: 10, userId: "blocked" }), () => budgetOf(1));
    expect(evaluation.decision).toBe("deny");
    expect(evaluation.shadowResults[0]?.errors).toEqual([{ ruleIndex: 1, message: BUDGET_EXHAUSTED }]);
  });
});
