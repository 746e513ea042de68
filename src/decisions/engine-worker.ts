// Piscina worker: a thin shell around the pure engine. It holds the shared
// reference data and a read-only connection to the store, and turns each task
// of a batch into signals and a score. Nothing here decides policy or writes state.
import { workerData } from "node:worker_threads";
import { ReferenceData, computeStoreSignals, mergeSignals, paymentOf, scoreSignals, type SharedReferenceData } from "../engine/index.js";
import { nameThread } from "../observability/thread-name.cjs";
import { openDatabase } from "../store/database.js";
import { ConsortiumRepository } from "../store/consortium.js";
import { GraphRepository } from "../store/graph.js";
import { HistoryRepository } from "../store/history.js";
import { graphKeysOf } from "../graph/entities.js";
import { runBacktest, type BacktestOutcome, type BacktestTask } from "./backtest.js";
import type { AnalyzeOutcome, EngineOutcome, EngineTask, FullTask } from "./engine-types.js";
import { FastPath, analyzeOutcome } from "./fast-path.js";

export interface EngineWorkerData {
  reference: SharedReferenceData;
  dataDir: string;
  /** Fault injection for tests: extra latency before every store read. */
  storeLatencyMs: number;
  /** The pool the thread serves, for its name: decide and analyze evaluations, or policy backtests. */
  role: "engine" | "backtest";
}

const config = workerData as EngineWorkerData;
nameThread(`fraud-${config.role}`);
const reference = ReferenceData.fromShared(config.reference);
const fastPath = new FastPath(reference);
const db = openDatabase(config.dataDir, { readonly: true });
const history = new HistoryRepository(db);
const graph = new GraphRepository(db);
const consortium = new ConsortiumRepository(db);
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** The evaluations of one batch (engine.ts), in order. */
export function evaluateBatch(tasks: readonly EngineTask[]): Array<EngineOutcome | AnalyzeOutcome> {
  return tasks.map((task) => (task.mode === "fast" ? analyzeOutcome(fastPath.outcome(task), task) : evaluate(task)));
}

function evaluate(task: FullTask): EngineOutcome {
  const started = performance.now();
  const fast = fastPath.signals(task);
  const fastDone = performance.now();
  if (config.storeLatencyMs > 0) Atomics.wait(sleeper, 0, 0, config.storeLatencyMs);
  const snapshot = {
    ...history.snapshot(task.tenant, task.entities, task.keys, task.nowMs, paymentOf(task.input)?.currency, task.inFlight),
    graph: graph.lookup(task.tenant, graphKeysOf(task.keys)),
    // Null (signal unavailable) when the account is not a consortium member.
    consortium: consortium.lookup(task.tenant, task.entities) ?? null,
  };
  const store = computeStoreSignals(task.input, snapshot, fast, task.nowMs);
  const signals = mergeSignals(fast, store, { denylisted: task.denylisted });
  const result = scoreSignals(signals, task.weights);
  return { signals, result, fastPathMs: fastDone - started, comprehensivePathMs: performance.now() - fastDone };
}

/** Replays a policy over stored decisions (policy backtests); see backtest.ts. */
export function backtest(task: BacktestTask): BacktestOutcome {
  if (config.storeLatencyMs > 0) Atomics.wait(sleeper, 0, 0, config.storeLatencyMs);
  return runBacktest(db, task);
}
