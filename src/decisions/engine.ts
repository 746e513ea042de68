import { Piscina } from "piscina";
import { DEFAULT_WEIGHTS, ReferenceData, type ReferenceDataOptions } from "../engine/index.js";
import type { BacktestOutcome, BacktestTask } from "./backtest.js";
import type { EngineOutcome, EngineTask } from "./engine-types.js";
import type { EngineWorkerData } from "./engine-worker.js";

export interface DecisionEngineOptions {
  dataDir: string;
  reference: ReferenceDataOptions;
  threads: number;
  /** How long decide waits for the comprehensive path before answering from the fast path. */
  comprehensiveBudgetMs: number;
  /** Fault injection for tests: extra latency before every store read in the workers. */
  storeLatencyMs?: number;
}

/** A decide evaluation: what to answer with, and the comprehensive outcome if it came late. */
export interface DualPathOutcome {
  outcome: EngineOutcome;
  /** False when the comprehensive path missed its budget and the answer is the fast path's. */
  comprehensiveInTime: boolean;
  /** When it missed: the comprehensive outcome, still running (undefined if it failed). */
  late?: Promise<EngineOutcome | undefined>;
}

/**
 * The dual-path engine in a Piscina pool created once at start. Workers share
 * the reference tables (SharedArrayBuffers) and read the store themselves, so
 * the request thread only sends a small task and receives signals and a score.
 */
export class DecisionEngine {
  private readonly pool: Piscina<EngineTask, EngineOutcome>;
  /** Backtests replay thousands of decisions: a thread of their own, so decides never queue behind one. */
  private readonly backtests: Piscina<BacktestTask, BacktestOutcome>;

  private constructor(
    private readonly options: DecisionEngineOptions,
    reference: ReferenceData,
  ) {
    const workerData: EngineWorkerData = {
      reference: reference.toShared(),
      dataDir: options.dataDir,
      storeLatencyMs: options.storeLatencyMs ?? 0,
    };
    this.pool = new Piscina({
      filename: new URL("./engine-worker-entry.mjs", import.meta.url).href,
      minThreads: options.threads,
      maxThreads: options.threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      // Bounded: under overload, fail fast instead of queueing without limit.
      maxQueue: 4096,
      workerData,
    });
    this.backtests = new Piscina({
      filename: new URL("./engine-worker-entry.mjs", import.meta.url).href,
      minThreads: 0,
      maxThreads: 1,
      idleTimeout: 60_000,
      maxQueue: 16,
      workerData,
    });
  }

  backtest(task: BacktestTask): Promise<BacktestOutcome> {
    return this.backtests.run(task, { name: "backtest" });
  }

  static load(options: DecisionEngineOptions): DecisionEngine {
    return new DecisionEngine(options, ReferenceData.load(options.reference));
  }

  /** Full evaluation within the budget, else the fast path's answer (part of issue 3's dual path). */
  async decide(task: Omit<EngineTask, "mode">): Promise<DualPathOutcome> {
    const full = this.pool.run({ ...task, mode: "full" }, { name: "evaluate" });
    let timer: NodeJS.Timeout | undefined;
    const missed = new Promise<"missed">((resolve) => {
      timer = setTimeout(() => resolve("missed"), this.options.comprehensiveBudgetMs);
    });
    const first = await Promise.race([full.catch(() => "failed" as const), missed]);
    clearTimeout(timer);
    if (first !== "missed" && first !== "failed") return { outcome: first, comprehensiveInTime: true };
    const outcome = await this.pool.run({ ...task, mode: "fast" }, { name: "evaluate" });
    return { outcome, comprehensiveInTime: false, late: full.catch(() => undefined) };
  }

  /**
   * Runs one throwaway evaluation per thread, so that loading the worker code
   * and opening the store happen before the first request, not inside its budget.
   */
  async warmUp(): Promise<void> {
    const task: EngineTask = {
      mode: "full",
      tenant: { accountId: "", environment: "test" },
      input: { userId: "warm-up", action: "login" },
      entities: { userId: "warm-up", ip: "", deviceId: "", email: "" },
      nowMs: Date.now(),
      weights: DEFAULT_WEIGHTS,
      denylisted: false,
    };
    await Promise.all(Array.from({ length: this.options.threads }, () => this.pool.run(task, { name: "evaluate" })));
  }

  /** The fast path alone (analyze). */
  fast(task: Omit<EngineTask, "mode">): Promise<EngineOutcome> {
    return this.pool.run({ ...task, mode: "fast" }, { name: "evaluate" });
  }

  get queueSize(): number {
    return this.pool.queueSize;
  }

  async close(): Promise<void> {
    await Promise.all([this.pool.close(), this.backtests.close()]);
  }
}
