import type { Clock } from "../clock.js";
import type { Logger } from "../log.js";

/** How often the background maintenance runs. */
const MAINTENANCE_INTERVAL_MS = 10 * 60 * 1000;

/** One kind of rows deleted once past their time: `prune` deletes them a step at a time (store/prune-steps.ts). */
export interface PruneTask {
  /** What the rows are, for the log. */
  what: string;
  prune(now: number, stopped: () => boolean): Promise<number>;
}

/**
 * Deletes what is past its time, every MAINTENANCE_INTERVAL_MS, one run at a time. Each task runs whether
 * the ones before it succeeded or not: a failure (the database busy past its timeout) is logged and tried
 * again at the next run; thrown from a timer, it would end the process.
 */
export class Maintenance {
  private readonly timer: NodeJS.Timeout;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly tasks: readonly PruneTask[],
    private readonly clock: Clock,
    private readonly logger: Logger,
    intervalMs = MAINTENANCE_INTERVAL_MS,
  ) {
    this.timer = setInterval(() => void this.run(), intervalMs);
    this.timer.unref();
  }

  /** Runs every task now (or joins the run under way); never rejects. */
  run(): Promise<void> {
    this.running ??= this.runTasks(this.clock.now()).finally(() => (this.running = undefined));
    return this.running;
  }

  /** No run starts after this; one under way stops at its next step, and this waits for it. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.stopped = true;
    await this.running;
  }

  private async runTasks(now: number): Promise<void> {
    for (const task of this.tasks) {
      if (this.stopped) return;
      try {
        const rows = await task.prune(now, () => this.stopped);
        if (rows > 0) this.logger.log("info", "rows past their time deleted", { what: task.what, rows });
      } catch (error) {
        this.logger.log("warn", "background pruning failed", { what: task.what, error: error instanceof Error ? error.message : String(error) });
      }
    }
  }
}
