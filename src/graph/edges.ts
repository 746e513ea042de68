import type { DecisionRecorder } from "../decisions/recorder.js";
import type { GraphRepository } from "../store/graph.js";
import { entityKeys } from "./entities.js";

/** Links every decision to its entities in the fraud graph, inside the decide transaction. */
export function registerGraphEdges(recorder: DecisionRecorder, graph: GraphRepository): void {
  recorder.addHook(({ tenant, decision, history, now }) => graph.recordEdges(tenant, decision.id, entityKeys(history), now));
}
