import type { CategoryWeights, EngineInput, ScoreResult, Signals } from "../engine/index.js";
import type { DecisionEntities } from "../store/history.js";
import type { Tenant } from "../store/tenant.js";
import type { InFlightCounts } from "./in-flight.js";

/** One engine evaluation, as sent to a worker (structured-cloned: plain data only). */
export interface EngineTask {
  /** full: fast and comprehensive paths; fast: in-memory signals only. */
  mode: "full" | "fast";
  tenant: Tenant;
  input: EngineInput;
  entities: DecisionEntities;
  nowMs: number;
  weights: CategoryWeights;
  denylisted: boolean;
  /** What the decides in flight add to the store's counts (full mode; none for analyze). */
  inFlight?: InFlightCounts | undefined;
}

export interface EngineOutcome {
  signals: Signals;
  result: ScoreResult;
  fastPathMs: number;
  comprehensivePathMs: number;
}
