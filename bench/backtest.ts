// Policy backtest at scale: stores 100,000 decisions (each with its evidence:
// request, signals and score, as decide stores them) in a fresh data
// directory, then replays a policy over all of them through the real engine
// pool, and prints how long the replay took.
//   node --import tsx bench/backtest.ts [--decisions N]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { create, toJson } from "@bufbuild/protobuf";
import { DecideRequestSchema } from "../gen/fraud/v1/decision_pb.js";
import { DecisionEngine } from "../src/decisions/engine.js";
import { definitionOf } from "../src/decisions/policy-set.js";
import type { DecisionDetails } from "../src/decisions/record.js";
import { createLogger } from "../src/log.js";
import { EMPTY_HISTORY_SNAPSHOT, ReferenceData, computeFastSignals, computeStoreSignals, mergeSignals, scoreSignals, DEFAULT_WEIGHTS, decideFromScore } from "../src/engine/index.js";
import { newId } from "../src/ids.js";
import { AccountRepository } from "../src/store/accounts.js";
import { openDatabase } from "../src/store/database.js";
import { DecisionRepository, decisionRow } from "../src/store/decisions.js";
import type { Tenant } from "../src/store/tenant.js";
import { benchRequests } from "./inputs.js";

const { values } = parseArgs({ options: { decisions: { type: "string", default: "100000" } } });
const total = Number(values.decisions);
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-backtest-bench-"));
process.on("exit", () => fs.rmSync(dataDir, { recursive: true, force: true }));

const db = openDatabase(dataDir);
const account = new AccountRepository(db).create("Backtest bench", {}, Date.now());
const tenant: Tenant = { accountId: account.id, environment: "live" };

const reference = ReferenceData.load({});
const requests = benchRequests().map((entry) => entry.request);
const decisions = new DecisionRepository<DecisionDetails>(db);
const insertStart = performance.now();
const now = Date.now();
const insertAll = db.transaction(() => {
  for (let i = 0; i < total; i++) {
    const request = { ...(requests[i % requests.length] as (typeof requests)[number]), userId: `user_${i % 20_000}` };
    const fast = computeFastSignals(request, reference, now);
    const signals = mergeSignals(fast, computeStoreSignals(request, EMPTY_HISTORY_SNAPSHOT, fast, now));
    const result = scoreSignals(signals, DEFAULT_WEIGHTS);
    const id = newId("dec");
    const evidenceId = newId("evi");
    const createdAt = now - (total - i) * 1000;
    const decision = decideFromScore(result.score);
    // Stored as decide stores it: the request in protobuf JSON.
    const requestJson = toJson(DecideRequestSchema, create(DecideRequestSchema, request));
    decisions.insert(
      tenant,
      decisionRow({
        id,
        evidenceId,
        requestId: newId("req"),
        userId: request.userId,
        action: request.action,
        createdAt,
        decision,
        score: result.score,
        confidence: result.confidence,
        details: {
          request: requestJson,
          reasons: result.reasons,
          confidencePercent: result.confidencePercent,
          categoryScores: result.categoryScores,
          contributions: result.contributions,
          weightsVersion: 1,
          policyResults: [],
          signalCoverage: "full",
          fastPathMs: 0,
          comprehensivePathMs: 0,
          processingTimeMs: 0,
        },
      }, { evidenceId, decisionId: id, request: requestJson, signals, score: result.score, decision, reasons: result.reasons }),
    );
  }
});
insertAll();
console.log(`stored ${total.toLocaleString("en-US")} decisions in ${((performance.now() - insertStart) / 1000).toFixed(1)} s`);

const engine = DecisionEngine.start({ dataDir, reference: {}, threads: 1, comprehensiveBudgetMs: 50, queueLimit: 4096, logger: createLogger() });
await engine.warmUp();
const policy = definitionOf({
  id: "pol_bench",
  version: 1,
  status: "active",
  priority: 10,
  actions: [],
  rules: [
    { condition: "signals.email.disposable AND amount > 100", action: "deny" },
    { condition: 'signals.userAgent.automation OR signals.device.webdriver', action: "deny" },
    { condition: "score >= 20 AND score < 30", action: "challenge" },
  ],
  createdAt: now,
});
const started = performance.now();
const outcome = await engine.backtest({ tenant, candidate: policy, fromMs: 0, toMs: now + 1, maxDecisions: total, maxExamples: 5, nowMs: now, timeLimitMs: Number.POSITIVE_INFINITY });
const wallMs = performance.now() - started;
console.log(
  `backtest over ${outcome.evaluated.toLocaleString("en-US")} decisions: ${(wallMs / 1000).toFixed(2)} s wall (${outcome.durationMs.toFixed(0)} ms in the worker), ` +
    `${outcome.changed.toLocaleString("en-US")} would change, ${outcome.matched.toLocaleString("en-US")} matched; ` +
    `${((outcome.durationMs * 1000) / Math.max(1, outcome.evaluated)).toFixed(1)} µs per decision`,
);
console.log(JSON.stringify(outcome.transitions));
await engine.close();
db.close();
