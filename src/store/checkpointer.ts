import path from "node:path";
import { Worker } from "node:worker_threads";
import type { Logger } from "../log.js";
import { DATABASE_FILE, type Db } from "./database.js";

/** How often the WAL is checkpointed into the database file. */
const CHECKPOINT_INTERVAL_MS = 1_000;

/**
 * Checkpoints the WAL from a background thread. SQLite's automatic checkpoint
 * runs inside whichever commit crosses the threshold — on the request thread,
 * with an fsync — so the server turns it off and lets this thread do it.
 */
export class Checkpointer {
  private readonly worker: Worker;

  constructor(db: Db, dataDir: string, logger: Logger) {
    db.pragma("wal_autocheckpoint = 0");
    this.worker = new Worker(new URL("./checkpoint-worker.mjs", import.meta.url), {
      workerData: { file: path.join(dataDir, DATABASE_FILE), intervalMs: CHECKPOINT_INTERVAL_MS },
      // It allocates almost nothing: a minimal heap.
      resourceLimits: { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 16 },
    });
    this.worker.on("message", (message: { error?: string }) => {
      if (message.error) logger.log("warn", "WAL checkpoint failed", { error: message.error });
    });
  }

  /** Final checkpoint, then the thread ends. */
  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.worker.once("exit", () => resolve());
      this.worker.postMessage("stop");
    });
  }
}
