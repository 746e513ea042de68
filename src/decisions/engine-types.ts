import type { CategoryWeights, EngineInput, ReasonCode, ScoreResult, Signals } from "../engine/index.js";
import type { EntityKeys } from "../graph/entities.js";
import type { DecisionEntities } from "../store/history.js";
import type { Tenant } from "../store/tenant.js";
import type { InFlightCounts } from "./in-flight.js";

/** What every engine evaluation is given, as sent to a worker (structured-cloned: plain data only). */
export interface EvaluationInput {
  tenant: Tenant;
  input: EngineInput;
  entities: DecisionEntities;
  nowMs: number;
  weights: CategoryWeights;
  denylisted: boolean;
}

/** The fast path alone: in-memory signals (analyze, and a decide's fallback). */
export interface FastTask extends EvaluationInput {
  mode: "fast";
  /**
   * Whether analyze's outcome carries the signals: only the account's own policies read them, and the
   * request thread decodes every byte an outcome brings back (the signals are four fifths of them).
   */
  withSignals: boolean;
}

/** Fast and comprehensive paths (decide): the store's signals too. */
export interface FullTask extends EvaluationInput {
  mode: "full";
  /** The entities' keys in the store, computed once by the decide (graph/entities.ts). */
  keys: EntityKeys;
  /** What the decides in flight add to the store's counts. */
  inFlight: InFlightCounts;
}

export type EngineTask = FastTask | FullTask;

/** What analyze reads of the fast path (engine threads send it back instead of the whole outcome). */
export interface AnalyzeOutcome {
  score: number;
  reasons: ReasonCode[];
  signalCoverage: "full" | "partial" | "minimal";
  /** When the task asked for them (FastTask.withSignals). */
  signals: Signals | undefined;
}

/** What the pool answers a task with: the whole outcome for a decide, analyze's share for a fast task. */
export type OutcomeOf<T extends EngineTask> = T extends FullTask ? EngineOutcome : AnalyzeOutcome;

export interface EngineOutcome {
  signals: Signals;
  result: ScoreResult;
  fastPathMs: number;
  comprehensivePathMs: number;
}
