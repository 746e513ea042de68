// Cost of compiling and evaluating policies. Not a test (timings vary by
// machine); run with: npx tsx test/policies/bench-policies.ts

import { DEFAULT_POLICY, ListSnapshot, compilePolicyUncached, evaluatePolicies } from "../src/policies/index.js";
import type { CompiledPolicy, PolicyDefinition } from "../src/policies/index.js";
import { context, policy } from "../test/policies/fixtures.js";

/** Twenty simple conditions over score, request fields and signals; none matches the clean context. */
const CONDITIONS = [
  "signals.network.tor == true",
  "signals.network.datacenter AND score > 20",
  "score >= 90",
  "amount > 5000 AND action == 'checkout'",
  "signals.email.disposable",
  "signals.device.webdriver OR signals.userAgent.headless",
  "signals.velocity.burst",
  "signals.geo.country == 'KP'",
  "signals.velocity.user.lastHour > 30",
  "signals.history.impossibleTravel AND score > 40",
  "signals.device.vm AND NOT signals.device.present",
  "email.endsWith('@mailinator.com')",
  "signals.behavior.tooFast AND signals.behavior.keystrokes > 100",
  "signals.userAgent.bot AND action == 'signup'",
  "signals.consortium.matches > 2",
  "signals.graph.linkedToFraud",
  "currency == 'XMR'",
  "signals.email.randomLocalPart AND signals.email.plusAddressed",
  "signals.network.reserved",
  "score > 80 AND signals.history.newDevice",
];

function compileAll(definitions: readonly PolicyDefinition[]): CompiledPolicy[] {
  return definitions.map((definition) => {
    const result = compilePolicyUncached(definition);
    if (!result.ok) throw new Error(JSON.stringify(result.errors));
    return result.policy;
  });
}

const definitions: PolicyDefinition[] = [
  ...CONDITIONS.map((condition, index) => policy([{ condition, action: "deny" }], { priority: 100 - index })),
  ...CONDITIONS.slice(0, 5).map((condition) => policy([{ condition, action: "deny" }], { status: "shadow" })),
  DEFAULT_POLICY,
];

/** Best of five rounds: the machine is shared, and the minimum is the least disturbed measurement. */
function perCallMicros(iterations: number, run: () => void): number {
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) run();
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1000 / iterations);
  }
  return best;
}

// Warm up the JIT before measuring.
perCallMicros(50, () => compileAll(definitions));
const compileMicros = perCallMicros(50, () => compileAll(definitions));

const compiled = compileAll(definitions);
const ctx = context({ score: 12 });
perCallMicros(20_000, () => evaluatePolicies(compiled, ctx));
const evaluateMicros = perCallMicros(100_000, () => evaluatePolicies(compiled, ctx));

const check = evaluatePolicies(compiled, ctx);
console.log(`policies: 20 active + default (${check.results.length} evaluated), ${check.shadowResults.length} shadow`);
const perRule = (compileMicros / definitions.length).toFixed(1);
console.log(`compile all ${definitions.length} policies: ${compileMicros.toFixed(1)} µs (${perRule} µs per rule)`);
console.log(`evaluatePolicies (all rules run, none matches): ${evaluateMicros.toFixed(2)} µs per decision`);

// An allow-list policy on top, over lists of 100,000 entries (a quarter of the IPs are CIDR ranges).
const users = Array.from({ length: 100_000 }, (_, i) => `user_${i}`);
const ips = Array.from({ length: 100_000 }, (_, i) =>
  i % 4 === 0 ? `10.${(i >> 8) & 255}.${i & 255}.0/24` : `172.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
);
const buildStart = process.hrtime.bigint();
const lists = ListSnapshot.build([
  { name: "vip_users", kind: "user", entries: users },
  { name: "blocked_ips", kind: "ip", entries: ips },
]);
const buildMillis = Number(process.hrtime.bigint() - buildStart) / 1e6;
const withLists = [
  ...compileAll([
    policy(
      [
        { condition: "userId in lists.vip_users", action: "allow" },
        { condition: "ip in lists.blocked_ips", action: "deny" },
      ],
      { priority: 1000 },
    ),
  ]),
  ...compiled,
];
const listCtx = context({ score: 12, userId: "someone", ip: "10.3.7.99", lists });
perCallMicros(5_000, () => evaluatePolicies(withLists, listCtx));
const listMicros = perCallMicros(20_000, () => evaluatePolicies(withLists, listCtx));
console.log(`ListSnapshot.build, 2 lists x 100,000 entries: ${buildMillis.toFixed(0)} ms`);
console.log(`evaluatePolicies, list policy on top (an IP in a listed /24 decides) + 5 shadow: ${listMicros.toFixed(2)} µs`);
