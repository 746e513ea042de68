// Engine-only micro-benchmark: the pure decision engine (fast signals, store
// signals over an empty history, merge, score) with no I/O, protocol or store
// in the way, so a regression in the engine shows up here before it is lost
// in the noise of the load runs.
//
// bench/run.ts runs this file in its own process (so the ~25 MB of reference
// data and the JIT state stay out of the load generator) and reads the last
// stdout line as JSON when given --json. It also runs alone:
//   node --import tsx bench/engine.ts [--iterations N]

import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import {
  DEFAULT_WEIGHTS,
  EMPTY_HISTORY_SNAPSHOT,
  ReferenceData,
  computeFastSignals,
  computeStoreSignals,
  mergeSignals,
  scoreSignals,
  type EngineInput,
} from "../src/engine/index.js";
import { benchRequests } from "./inputs.js";

export interface EngineBenchResult {
  referenceDataLoadMs: number;
  inputs: number;
  iterations: number;
  /** Median of the rounds over the mixed input set. */
  nsPerOp: number;
  opsPerSecond: number;
  perPersona: Array<{ persona: string; nsPerOp: number }>;
}

const ROUNDS = 5;
const WARMUP_MIN_OPS = 20_000;

export function runEngineBenchmark(iterations: number): EngineBenchResult {
  const loadStart = performance.now();
  const referenceData = ReferenceData.load();
  const referenceDataLoadMs = performance.now() - loadStart;

  const named = benchRequests();
  const inputs: EngineInput[] = named.map((n) => n.request);
  // A fixed clock: the service reads the time once per request too, and a
  // constant keeps time-zone offsets identical across rounds.
  const nowMs = Date.now();
  let sink = 0;
  const evaluate = (input: EngineInput): void => {
    const fast = computeFastSignals(input, referenceData, nowMs);
    const store = computeStoreSignals(input, EMPTY_HISTORY_SNAPSHOT, fast, nowMs);
    sink += scoreSignals(mergeSignals(fast, store), DEFAULT_WEIGHTS).score;
  };
  const timeNs = (count: number, pick: (i: number) => EngineInput): number => {
    const start = process.hrtime.bigint();
    for (let i = 0; i < count; i++) evaluate(pick(i));
    return Number(process.hrtime.bigint() - start) / count;
  };
  const mixed = (i: number): EngineInput => inputs[i % inputs.length] as EngineInput;

  // Warm-up so the rounds measure optimised code, not the interpreter; a
  // floor because small --iterations runs would otherwise time the JIT.
  timeNs(Math.max(WARMUP_MIN_OPS, Math.floor(iterations / 5)), mixed);
  const rounds = Array.from({ length: ROUNDS }, () => timeNs(Math.ceil(iterations / ROUNDS), mixed)).sort((a, b) => a - b);
  const nsPerOp = rounds[Math.floor(ROUNDS / 2)] as number;

  const personas = [...new Set(named.map((n) => n.persona))];
  const perPersona = personas.map((persona) => {
    const own = inputs.filter((_, i) => named[i]?.persona === persona);
    return { persona, nsPerOp: timeNs(Math.ceil(iterations / personas.length), (i) => own[i % own.length] as EngineInput) };
  });

  // Keeps the optimiser from discarding the work whose result nobody reads.
  if (sink < 0) throw new Error("negative score sum");
  return { referenceDataLoadMs, inputs: inputs.length, iterations, nsPerOp, opsPerSecond: 1e9 / nsPerOp, perPersona };
}

export function formatEngineResult(result: EngineBenchResult): string {
  const lines = [
    `Engine micro-benchmark: fast + store signals + score, ${result.inputs} varied inputs, ${result.iterations.toLocaleString("en-US")} ops, median of ${ROUNDS} rounds`,
    `  reference data loaded in ${result.referenceDataLoadMs.toFixed(0)} ms`,
    `  ${result.nsPerOp.toFixed(0).padStart(8)} ns/op   ${Math.round(result.opsPerSecond).toLocaleString("en-US")} ops/s (one core)`,
  ];
  for (const p of result.perPersona) lines.push(`  ${p.nsPerOp.toFixed(0).padStart(8)} ns/op   ${p.persona}`);
  return lines.join("\n");
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;
if (isMain) {
  const { values } = parseArgs({ options: { iterations: { type: "string", default: "50000" }, json: { type: "boolean" } } });
  const iterations = Number(values.iterations);
  if (!Number.isInteger(iterations) || iterations < 100) throw new Error("--iterations must be an integer of at least 100");
  const result = runEngineBenchmark(iterations);
  process.stdout.write(values.json ? JSON.stringify(result) + "\n" : formatEngineResult(result) + "\n");
}
