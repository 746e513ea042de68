import { Piscina } from "piscina";
import { AtCapacityError } from "../api/errors.js";
import { DEFAULT_WEIGHTS, ReferenceData, type EngineInput, type ReferenceDataOptions } from "../engine/index.js";
import type { BacktestOutcome, BacktestTask } from "./backtest.js";
import type { AnalyzeOutcome, EngineOutcome, EngineTask, FastTask, FullTask, OutcomeOf } from "./engine-types.js";
import type { EngineWorkerData } from "./engine-worker.js";
import { FastPath, analyzeOutcome } from "./fast-path.js";
import { entityKeysByKind } from "../graph/entities.js";
import { NONE_IN_FLIGHT } from "./in-flight.js";
import type { Logger } from "../log.js";
import { loadSharedReference } from "./reference-loader.js";

export interface DecisionEngineOptions {
  dataDir: string;
  reference: ReferenceDataOptions;
  threads: number;
  /**
   * How long decide waits for the comprehensive path before answering from the fast path, and analyze for
   * the pool's fast path before computing it on the request thread.
   */
  comprehensiveBudgetMs: number;
  /** Decides and analyzes waiting for or in the pool before more are refused with AtCapacityError (503). */
  queueLimit: number;
  /** Fault injection for tests: extra latency before every store read in the workers. */
  storeLatencyMs?: number;
  logger: Logger;
}

/** Backtests waiting for their thread before more are refused; each can take seconds. */
const BACKTEST_QUEUE_LIMIT = 16;
/** Backtests one account and environment may have running or waiting: the queue is shared by all. */
const BACKTESTS_PER_TENANT = 2;

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
 * the request thread only sends small tasks (in batches) and receives signals
 * and scores.
 */
interface Pools {
  engine: EngineBatches;
  /** Backtests replay thousands of decisions: a thread of their own, so decides never queue behind one. */
  backtests: Piscina<BacktestTask, BacktestOutcome>;
  /**
   * The fast path on the request thread, over the same shared tables: the answer when the pool is late. A
   * late pool is a busy one (a batch's store reads, a backlog), and an evaluation asked of it again would
   * wait behind the same work; here it costs tens of microseconds of the request thread, and only then.
   */
  here: FastPath;
}

export class DecisionEngine {
  /** Ready once the reference tables are built (in a throwaway thread) and the pools exist. */
  private readonly pools: Promise<Pools>;
  /** Backtests not finished yet: the one running and those waiting for the thread. */
  private backtestsUnfinished = 0;
  /** The same, per account and environment (keyed "account/environment"). */
  private readonly backtestsPerTenant = new Map<string, number>();
  /** The evaluation batches, once the pools exist. */
  private batches: EngineBatches | undefined;

  private constructor(private readonly options: DecisionEngineOptions) {
    const loadStarted = performance.now();
    this.pools = loadSharedReference(options.reference).then(({ shared: reference, source, snapshotError, unreadableLists }) => {
      const ms = Math.round(performance.now() - loadStarted);
      options.logger.log("info", "reference tables loaded", { source, ms });
      if (snapshotError !== undefined) {
        options.logger.log("warn", "could not write the reference snapshot; the next start builds the tables again", { error: snapshotError });
      }
      for (const list of unreadableLists) {
        options.logger.log("warn", "cannot read a list file: its signal stays off until the file can be read", { ...list });
      }
      const workerData: Omit<EngineWorkerData, "role"> = { reference, dataDir: options.dataDir, storeLatencyMs: options.storeLatencyMs ?? 0 };
      const filename = new URL("./engine-worker-entry.mjs", import.meta.url).href;
      const evaluations = new Piscina<EngineTask[], PoolOutcome[]>({
        filename,
        minThreads: options.threads,
        maxThreads: options.threads,
        concurrentTasksPerWorker: 2,
        idleTimeout: Number.POSITIVE_INFINITY,
        // A backstop: EngineBatches bounds the evaluations themselves (a task here is a batch of them).
        maxQueue: options.queueLimit,
        workerData: { ...workerData, role: "engine" } satisfies EngineWorkerData,
        // Tasks are small and short-lived: a small young generation keeps each thread's footprint down.
        resourceLimits: { maxYoungGenerationSizeMb: 8 },
      });
      this.batches = new EngineBatches(options.threads, options.queueLimit, evaluations);
      return {
        engine: this.batches,
        backtests: new Piscina({ filename, minThreads: 0, maxThreads: 1, idleTimeout: 60_000, maxQueue: BACKTEST_QUEUE_LIMIT + 1, workerData: { ...workerData, role: "backtest" } satisfies EngineWorkerData }),
        here: new FastPath(ReferenceData.fromShared(reference)),
      };
    });
    // A failure surfaces to the callers that await the pools; it must not also crash the process unobserved.
    this.pools.catch(() => undefined);
  }

  /** Starts loading the reference data and the pools; `warmUp` waits for them. */
  static start(options: DecisionEngineOptions): DecisionEngine {
    return new DecisionEngine(options);
  }

  async backtest(task: BacktestTask): Promise<BacktestOutcome> {
    const pools = await this.pools;
    // Counted here rather than left to Piscina's maxQueue (one more, for the task that waits while the
    // thread starts), whose refusal is a plain Error.
    if (this.backtestsUnfinished > BACKTEST_QUEUE_LIMIT) throw new AtCapacityError("the backtest queue is full");
    const tenant = `${task.tenant.accountId}/${task.tenant.environment}`;
    const ofTenant = this.backtestsPerTenant.get(tenant) ?? 0;
    if (ofTenant >= BACKTESTS_PER_TENANT) {
      throw new AtCapacityError(`this account already has ${BACKTESTS_PER_TENANT} backtests running or waiting in this environment`, 5);
    }
    this.backtestsUnfinished++;
    this.backtestsPerTenant.set(tenant, ofTenant + 1);
    try {
      return await pools.backtests.run(task, { name: "backtest" });
    } finally {
      this.backtestsUnfinished--;
      const left = (this.backtestsPerTenant.get(tenant) ?? 1) - 1;
      if (left === 0) this.backtestsPerTenant.delete(tenant);
      else this.backtestsPerTenant.set(tenant, left);
    }
  }

  /** Full evaluation within the budget, else the fast path's answer (part of issue 3's dual path). */
  async decide(task: Omit<FullTask, "mode">): Promise<DualPathOutcome> {
    const pools = await this.pools;
    const full = pools.engine.run({ ...task, mode: "full" });
    // A full queue refuses the decide (503); any other failure of the comprehensive path falls back to the fast one.
    const first = await this.withinBudget(full.catch((error: unknown) => (error instanceof AtCapacityError ? Promise.reject(error) : ("failed" as const))));
    if (first !== "late" && first !== "failed") return { outcome: first, comprehensiveInTime: true };
    return { outcome: pools.here.outcome(task), comprehensiveInTime: false, late: full.catch(() => undefined) };
  }

  /**
   * Runs throwaway evaluations on every thread, and on the fast path of this
   * thread (a decide's fallback, analyze's backstop), so that loading the worker
   * code, opening the store and compiling what parsing a request takes happen
   * before the first requests, not inside their budget. The user-agent parser
   * compiles its regular expressions as a kind of browser first needs them (10
   * to 25 ms for each of Chrome, Safari, Firefox): one login from each common
   * kind, with a device and behavior so that every signal's code runs.
   */
  async warmUp(): Promise<void> {
    // One full evaluation per thread opens its store and runs its reads; the other kinds of browser need only
    // the fast path's (the user-agent parser's), and a slow store is not waited on once per kind.
    const entities = { userId: WARM_UP_INPUT.userId, ip: WARM_UP_INPUT.ip, deviceId: "", email: WARM_UP_INPUT.email };
    const keys = entityKeysByKind(entities);
    const nowMs = Date.now();
    const tasks = WARM_UP_USER_AGENTS.map((userAgent, i): EngineTask => {
      const evaluation = { tenant: { accountId: "", environment: "test" as const }, input: { ...WARM_UP_INPUT, userAgent }, entities, nowMs, weights: DEFAULT_WEIGHTS, denylisted: false };
      return i === 0 ? { ...evaluation, mode: "full", keys, inFlight: NONE_IN_FLIGHT } : { ...evaluation, mode: "fast", withSignals: false };
    });
    const pools = await this.pools;
    try {
      for (const task of tasks) pools.here.outcome(task);
      await pools.engine.warmUp(tasks);
    } catch (error) {
      // Start-up stops on it: say where it came from, not only what it was.
      throw new Error(`the engine's warm-up evaluation failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
  }

  /** The fast path alone (analyze): from the pool, or computed here when the pool has not answered within the budget. */
  async fast(task: Omit<FastTask, "mode">): Promise<AnalyzeOutcome> {
    const pools = await this.pools;
    const evaluation = pools.engine.run({ ...task, mode: "fast" });
    const first = await this.withinBudget(evaluation);
    if (first !== "late") return first;
    // The pool's outcome, the same as this one, is dropped when it comes; a failure then has no one to tell.
    evaluation.catch(() => undefined);
    return analyzeOutcome(pools.here.outcome(task), task);
  }

  /** What `evaluation` settles to if it does within the budget (measured from now, so queueing counts), else "late". */
  private async withinBudget<T>(evaluation: Promise<T>): Promise<T | "late"> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(resolve, this.options.comprehensiveBudgetMs, "late");
    });
    try {
      return await Promise.race([evaluation, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Decides and analyzes waiting for or in the pool now (the metric of the queue FRAUD_ENGINE_QUEUE_LIMIT bounds). */
  unanswered(): number {
    return this.batches?.unanswered ?? 0;
  }

  async close(): Promise<void> {
    const pools = await this.pools.catch(() => undefined);
    if (pools) await Promise.all([pools.engine.close(), pools.backtests.close()]);
  }
}

/** A login with a device and behavior, the warm-up's input (with each of {@link WARM_UP_USER_AGENTS}). */
const WARM_UP_INPUT = {
  userId: "warm-up",
  action: "login",
  ip: "81.2.69.160",
  email: "warm-up@example.com",
  device: {
    webdriver: false,
    webglRenderer: "ANGLE (NVIDIA, NVIDIA GeForce RTX 3060 Direct3D11 vs_5_0 ps_5_0, D3D11)",
    webglVendor: "Google Inc. (NVIDIA)",
    timezone: "Europe/London",
    languages: ["en-GB", "en"],
    platform: "Win32",
    screen: { width: 1920, height: 1080, colorDepth: 24, pixelRatio: 1 },
    hardwareConcurrency: 8,
    deviceMemory: 8,
    touchSupport: { maxTouchPoints: 0, touchEvent: false },
  },
  behavior: { timeOnPageMs: 12_000, formFillMs: 6_000, keystrokes: 24, pointerMoves: 80, pasteEvents: 0, clicks: 3 },
} as const satisfies EngineInput;

/** The browsers most logins come from, and the bots and tools decide most often meets. */
const WARM_UP_USER_AGENTS = [
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/23.0 Chrome/115.0.0.0 Mobile Safari/537.36",
  "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36",
  "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
  "python-requests/2.32.3",
  "curl/8.5.0",
];

/** What the pool's threads answer an evaluation with (engine-worker.ts): by the task's mode. */
type PoolOutcome = EngineOutcome | AnalyzeOutcome;

function outcomeFits<T extends EngineTask>(task: T, outcome: PoolOutcome): outcome is OutcomeOf<T> {
  return task.mode === "full" ? "result" in outcome : "signalCoverage" in outcome;
}

interface Waiting {
  task: EngineTask;
  resolve(outcome: PoolOutcome): void;
  reject(error: unknown): void;
}

/**
 * The evaluations asked for in one event-loop turn go to the pool together,
 * split evenly over its threads: one task, one message each way and one
 * wake-up per thread instead of per evaluation. Each evaluation is about
 * 60 µs of a worker's time; the pool's own handling of a task cost the request
 * thread nearly as much (docs/benchmarks.md).
 */
class EngineBatches {
  private waiting: Waiting[] = [];
  /** Evaluations asked for and not answered yet, waiting or in the pool. */
  unanswered = 0;

  constructor(
    private readonly threads: number,
    /** What the pool would hold before refusing more, in evaluations rather than batches. */
    private readonly queueLimit: number,
    private readonly pool: Piscina<EngineTask[], PoolOutcome[]>,
  ) {}

  run<T extends EngineTask>(task: T): Promise<OutcomeOf<T>> {
    // Bounded: under overload, fail fast instead of queueing without limit.
    if (this.unanswered >= this.queueLimit) return Promise.reject(new AtCapacityError("the engine's queue is full"));
    this.unanswered++;
    return new Promise<OutcomeOf<T>>((resolve, reject) => {
      const settle = (outcome: PoolOutcome) => (outcomeFits(task, outcome) ? resolve(outcome) : reject(new Error(`the engine answered a ${task.mode} evaluation with another kind of outcome`)));
      if (this.waiting.push({ task, resolve: settle, reject }) === 1) setImmediate(() => this.flush());
    }).finally(() => this.unanswered--);
  }

  /** The same batch on every thread. */
  async warmUp(tasks: EngineTask[]): Promise<void> {
    await Promise.all(Array.from({ length: this.threads }, () => this.pool.run(tasks, { name: "evaluateBatch" })));
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  private flush(): void {
    const waiting = this.waiting;
    this.waiting = [];
    // A batch answers when its last evaluation is done: fast ones (analyze) are not held back by the store
    // reads of comprehensive ones in the same batch. (A thread still runs one batch at a time: a fast batch
    // can wait behind a comprehensive one, and the budget above bounds that wait.)
    this.send(waiting.filter((w) => w.task.mode === "fast"));
    this.send(waiting.filter((w) => w.task.mode === "full"));
  }

  /** Evaluations split evenly over the threads, one batch each. */
  private send(waiting: Waiting[]): void {
    if (waiting.length === 0) return;
    const size = Math.ceil(waiting.length / this.threads);
    for (let start = 0; start < waiting.length; start += size) {
      const batch = waiting.slice(start, start + size);
      this.pool.run(
        batch.map((w) => w.task),
        { name: "evaluateBatch" },
      ).then(
        (outcomes) => batch.forEach((w, i) => (outcomes[i] ? w.resolve(outcomes[i]) : w.reject(new Error("the engine returned no outcome")))),
        (error: unknown) => batch.forEach((w) => w.reject(error)),
      );
    }
  }
}
