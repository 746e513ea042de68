// Moves WAL checkpoints (and their fsyncs) off the request thread: the server's
// own connection has auto-checkpointing off, and this thread checkpoints on a
// timer through a connection of its own. Plain JavaScript, as it needs no types
// and runs in a worker thread without a TypeScript loader.
import { parentPort, workerData } from "node:worker_threads";
import Database from "./sqlite-driver.cjs";
import { nameThread } from "../observability/thread-name.cjs";
import { startOver } from "./wal-restart.mjs";

const { file, intervalMs, restartAboveFrames, forceRestartAboveFrames, stuckWarningMs } = workerData;
nameThread("fraud-wal");

const db = new Database(file);
// Never waits for a lock: a checkpoint that would have to wait for a writer or a reader
// copies what it can now, and looks again later (wal-restart.mjs).
db.pragma("busy_timeout = 0");

const sleeper = new Int32Array(new SharedArrayBuffer(4));
const wal = {
  /** One PASSIVE pass: copies what no reader still needs, never blocks anyone. */
  passive() {
    const [{ log, checkpointed }] = db.pragma("wal_checkpoint(PASSIVE)");
    return { log, checkpointed };
  },
  restart() {
    const [{ busy, log, checkpointed }] = db.pragma("wal_checkpoint(RESTART)");
    return { busy, log, checkpointed };
  },
  pause(ms) {
    Atomics.wait(sleeper, 0, 0, ms);
  },
};

/**
 * When the WAL was first seen past the hard limit, in this stretch of ticks that all ended past it; the
 * warning goes once per stretch. Measured in time, not ticks: a tick of many passes over a large WAL (a
 * long read holding it, such as `fraudctl audit verify`) takes far longer than the interval.
 */
let stuckSince;
let warned = false;

function checkpoint() {
  try {
    const pass = wal.passive();
    const frames = pass.log > restartAboveFrames ? startOver(wal, pass, forceRestartAboveFrames) : pass.log;
    if (frames <= forceRestartAboveFrames) {
      stuckSince = undefined;
      warned = false;
    } else {
      stuckSince ??= performance.now();
      if (!warned && performance.now() - stuckSince >= stuckWarningMs) {
        warned = true;
        // A reader that never finishes (or a writer that never pauses) keeps even the forced restart out.
        parentPort?.postMessage({ warning: "the WAL cannot start over: a reader or writer holds it past the hard limit", frames });
      }
    }
  } catch (error) {
    parentPort?.postMessage({ error: String(error) });
  }
  timer = setTimeout(checkpoint, intervalMs);
}

let timer = setTimeout(checkpoint, intervalMs);

parentPort?.on("message", (message) => {
  if (message !== "stop") return;
  clearTimeout(timer);
  try {
    db.pragma("busy_timeout = 5000");
    db.pragma("wal_checkpoint(TRUNCATE)");
  } finally {
    db.close();
    parentPort?.close();
  }
});
