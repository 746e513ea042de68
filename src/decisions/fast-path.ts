// The fast path of one evaluation: in-memory signals and their score. The engine threads run it for every
// evaluation; the request thread runs it too, as the answer of last resort when the pool is late (engine.ts),
// over the same shared reference tables. Both therefore compute exactly the same outcome.
import { computeFastSignals, mergeSignals, paymentOf, scoreSignals, type FastSignals, type ReferenceData, type Signals } from "../engine/index.js";
import type { AnalyzeOutcome, EngineOutcome, EvaluationInput, FastTask } from "./engine-types.js";

/** The Tor and datacenter lists can change while the service runs; look at most once a second. */
const RELOAD_CHECK_MS = 1_000;

export class FastPath {
  private lastReloadCheck = Number.NEGATIVE_INFINITY;

  constructor(private readonly reference: ReferenceData) {}

  /** The in-memory signals of `task`, from list files reread when they changed. */
  signals(task: EvaluationInput): FastSignals {
    const now = performance.now();
    if (now - this.lastReloadCheck > RELOAD_CHECK_MS) {
      this.lastReloadCheck = now;
      this.reference.reloadIfChanged();
    }
    return computeFastSignals(task.input, this.reference, task.nowMs);
  }

  /** The fast path's whole outcome: its signals scored, the store categories marked unavailable. */
  outcome(task: EvaluationInput): EngineOutcome {
    const started = performance.now();
    // A payment's amount category applies though the store did not answer: it counts for coverage, without data.
    const signals = mergeSignals(this.signals(task), null, { denylisted: task.denylisted }, paymentOf(task.input));
    const result = scoreSignals(signals, task.weights);
    return { signals, result, fastPathMs: performance.now() - started, comprehensivePathMs: 0 };
  }
}

/** Analyze's share of a fast outcome (part 2.3): its score, reasons and coverage, and the signals if asked for. */
export function analyzeOutcome(outcome: EngineOutcome, task: Pick<FastTask, "withSignals">): AnalyzeOutcome {
  return {
    score: outcome.result.score,
    reasons: outcome.result.reasons,
    signalCoverage: analyzeCoverage(outcome.signals),
    signals: task.withSignals ? outcome.signals : undefined,
  };
}

/**
 * Analyze's `signalCoverage` (docs/decisions.md). full: the network, the user agent and the device were all
 * there to read; minimal: neither user agent nor device; partial: anything in between. Judged by what the
 * engine read: a user agent of spaces is none (MISSING_USER_AGENT).
 */
function analyzeCoverage(signals: Signals): AnalyzeOutcome["signalCoverage"] {
  const hasAgent = signals.userAgent.present;
  const hasDevice = signals.device.present;
  if (!hasAgent && !hasDevice) return "minimal";
  return hasAgent && hasDevice && signals.network.valid ? "full" : "partial";
}
