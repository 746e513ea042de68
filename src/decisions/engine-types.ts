import type { CategoryWeights, EngineInput, ScoreResult, Signals } from "../engine/index.js";
import type { EntityKeys } from "../graph/entities.js";
import type { DecisionEntities } from "../store/history.js";
import type { Tenant } from "../store/tenant.js";
import type { InFlightCounts } from "./in-flight.js";

/** What every engine evaluation is given, as sent to a worker (structured-cloned: plain data only). */
interface EvaluationInput {
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

export interface EngineOutcome {
  signals: Signals;
  result: ScoreResult;
  fastPathMs: number;
  comprehensivePathMs: number;
}
