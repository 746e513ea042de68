import type { Signals } from "../engine/index.js";
import type { PolicyDefinition } from "../policies/index.js";
import type { Db } from "../store/database.js";
import { ListRepository } from "../store/lists.js";
import { PolicyRepository } from "../store/policies.js";
import type { Tenant } from "../store/tenant.js";
import { PolicySets, type SkippedPolicy } from "./policy-set.js";
import type { StoredRequest } from "./record.js";

export interface BacktestTask {
  tenant: Tenant;
  /** The policy to replay; replaces the stored policy with the same id. */
  candidate: PolicyDefinition;
  fromMs: number;
  toMs: number;
  maxDecisions: number;
  maxExamples: number;
  nowMs: number;
  /** Wall time the replay may take; it stops there and says so. */
  timeLimitMs: number;
}

export interface BacktestOutcome {
  evaluated: number;
  changed: number;
  matched: number;
  errors: number;
  transitions: Array<{ from: string; to: string; count: number }>;
  examples: Array<{ decisionId: string; userId: string; score: number; from: string; to: string; matchedRule: number }>;
  durationMs: number;
  /** Stored policies left out because they no longer compile (as PolicySets reports them, without the tenant asked about). */
  skippedPolicies: Array<Omit<SkippedPolicy, "tenant">>;
  /** The replay stopped at the time limit: the counts cover the newest `evaluated` decisions of the window. */
  timeLimitReached: boolean;
}

interface ReplayRow {
  id: string;
  user_id: string;
  decision: string;
  score: number;
  content: string;
}

/**
 * Replays a policy over stored decisions with the live evaluation code
 * (PolicySets.replay, evaluate without the time budget): each decision's stored score, signals and request go
 * through the account's policies, and the decision the candidate would have made, active where it stands, is
 * compared with what was decided. Runs in a worker thread.
 */
export function runBacktest(db: Db, task: BacktestTask): BacktestOutcome {
  const started = performance.now();
  const outcome: BacktestOutcome = { evaluated: 0, changed: 0, matched: 0, errors: 0, transitions: [], examples: [], durationMs: 0, skippedPolicies: [], timeLimitReached: false };
  const sets = new PolicySets(new PolicyRepository(db), new ListRepository(db), ({ policyId, name, version, errors }) =>
    outcome.skippedPolicies.push({ policyId, name, version, errors }),
  );
  // Replayed in shadow, which evaluates it on every decision whichever policy decides: what it matches and
  // its rule errors are its own, as live shadow results say, and its shadow decision is the one it would
  // make active where it stands (the decision's own when a policy above it decides).
  const policies = sets.forTenant(task.tenant, task.nowMs, { ...task.candidate, status: "shadow" });
  const rows = db
    .prepare<[string, string, number, number, number], ReplayRow>(
      `SELECT d.id, d.user_id, d.decision, d.score, e.content FROM decisions d JOIN evidence e ON e.id = d.evidence_id
       WHERE d.account_id = ? AND d.environment = ? AND d.created_at >= ? AND d.created_at < ?
       ORDER BY d.created_at DESC LIMIT ?`,
    )
    .iterate(task.tenant.accountId, task.tenant.environment, task.fromMs, task.toMs, task.maxDecisions);

  const transitions = new Map<string, number>();
  const examplesPerKind = new Map<string, number>();
  for (const row of rows) {
    // The thread is shared by every account's backtests: none holds it past its limit.
    if (performance.now() - started > task.timeLimitMs) {
      outcome.timeLimitReached = true;
      break;
    }
    const evidence = JSON.parse(row.content) as { request: StoredRequest; signals: Signals };
    const request = evidence.request;
    const evaluation = sets.replay(policies, {
      score: row.score,
      action: request.action ?? "",
      userId: request.userId ?? row.user_id,
      amount: request.amount,
      currency: request.currency ?? "",
      email: request.email ?? "",
      ip: request.ip ?? "",
      deviceId: request.deviceId ?? "",
      metadata: request.metadata,
      signals: evidence.signals,
    });
    outcome.evaluated++;
    // Absent when the candidate does not apply to the decision's action.
    const at = evaluation.shadowResults.findIndex((result) => result.policyId === task.candidate.id);
    const own = evaluation.shadowResults[at];
    const decision = evaluation.shadowDecisions[at] ?? evaluation.decision;
    if (own && own.matchedRule >= 0) outcome.matched++;
    outcome.errors += own?.errors.length ?? 0;
    if (decision === row.decision) continue;
    outcome.changed++;
    const kind = `${row.decision}\u0000${decision}`;
    transitions.set(kind, (transitions.get(kind) ?? 0) + 1);
    const shown = examplesPerKind.get(kind) ?? 0;
    if (shown < task.maxExamples) {
      examplesPerKind.set(kind, shown + 1);
      outcome.examples.push({ decisionId: row.id, userId: row.user_id, score: row.score, from: row.decision, to: decision, matchedRule: own?.matchedRule ?? -1 });
    }
  }
  outcome.transitions = [...transitions].map(([kind, count]) => {
    const [from = "", to = ""] = kind.split("\u0000");
    return { from, to, count };
  }).sort((a, b) => b.count - a.count);
  outcome.durationMs = Math.round((performance.now() - started) * 1000) / 1000;
  return outcome;
}
