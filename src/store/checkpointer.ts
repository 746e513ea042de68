import path from "node:path";
import { inspect } from "node:util";
import { Worker } from "node:worker_threads";
import { RepeatedFailureLog, type Logger } from "../log.js";
import { DATABASE_FILE, type Db } from "./database.js";

export interface CheckpointerOptions {
  /** How often the WAL is checkpointed into the database file. */
  intervalMs: number;
  /**
   * Past this many frames the checkpointer starts the WAL over (wal-restart.mjs) at the first moment
   * it finds it wholly copied, which holds writers for microseconds.
   */
  restartAboveFrames: number;
  /**
   * Past this many, it starts over even without such a moment, holding writers while it copies the rest and
   * syncs (milliseconds to tens of them): what bounds the file when commits never pause (docs/benchmarks.md).
   */
  forceRestartAboveFrames: number;
  /** How long the WAL may stay past that limit (a reader or writer holding it) before the log says so. */
  stuckWarningMs: number;
}

/**
 * Frames of 4 KiB pages: past about 256 MiB (2 to 3 s at 1,000 decides a second) the WAL starts over at the
 * next moment between two commits, and past 512 MiB whatever it costs the writers.
 */
const DEFAULT_OPTIONS: CheckpointerOptions = { intervalMs: 200, restartAboveFrames: 65_536, forceRestartAboveFrames: 131_072, stuckWarningMs: 5_000 };

/**
 * Checkpoints the WAL from a background thread. SQLite's automatic checkpoint
 * runs inside whichever commit crosses the threshold — on the request thread,
 * with an fsync — so the server turns it off and lets this thread do it.
 */
export class Checkpointer {
  private readonly worker: Worker;
  /** Settles when the thread has ended, however it ended. */
  private readonly exited: Promise<void>;

  constructor(db: Db, dataDir: string, logger: Logger, options: CheckpointerOptions = DEFAULT_OPTIONS) {
    db.pragma("wal_autocheckpoint = 0");
    this.worker = new Worker(new URL("./checkpoint-worker.mjs", import.meta.url), {
      workerData: { file: path.join(dataDir, DATABASE_FILE), ...options },
      // It allocates almost nothing: a minimal heap.
      resourceLimits: { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 16 },
    });
    const checkpointFailed = new RepeatedFailureLog(logger, "warn", "WAL checkpoint failed");
    this.worker.on("message", (message: { error?: string; warning?: string; frames?: number }) => {
      if (message.error) checkpointFailed.failed({ error: message.error });
      if (message.warning) logger.log("warn", message.warning, { walFrames: message.frames });
    });
    // Without this listener a failing thread would take the process down. Without checkpoints the WAL only
    // grows until the next start, which checkpoints it: worth an error in the log, not an outage.
    // What a worker throws reaches here as it was cloned: an Error, or a plain object (String() would say
    // "[object Object]"), which inspect() shows whole.
    this.worker.on("error", (error: unknown) =>
      logger.log("error", "the WAL checkpointer thread failed; checkpoints stop until restart", { error: error instanceof Error ? (error.stack ?? error.message) : inspect(error) }),
    );
    this.exited = new Promise((resolve) => this.worker.once("exit", () => resolve()));
  }

  /** Final checkpoint, then the thread ends (at once if it already has). */
  stop(): Promise<void> {
    this.worker.postMessage("stop");
    return this.exited;
  }
}
