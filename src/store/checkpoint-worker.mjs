// Moves WAL checkpoints (and their fsyncs) off the request thread: the server's
// own connection has auto-checkpointing off, and this thread checkpoints on a
// timer through a connection of its own. Plain JavaScript, as it needs no types
// and runs in a worker thread without a TypeScript loader.
import { parentPort, workerData } from "node:worker_threads";
import Database from "./sqlite-driver.cjs";

const { file, intervalMs, restartAboveFrames } = workerData;
/** A pass that finds fewer new frames than this leaves little for the write lock to wait on. */
const FEW_FRAMES = 32;
/** Passes before the restart is tried anyway. */
const MAX_PASSES = 8;

const db = new Database(file);
// Never waits for a lock: a checkpoint that would have to wait for a writer or a reader
// copies what it can now, and the next tick tries again.
db.pragma("busy_timeout = 0");

function checkpoint() {
  try {
    const [{ log }] = db.pragma("wal_checkpoint(PASSIVE)");
    if (log > restartAboveFrames) startOver(log);
  } catch (error) {
    parentPort?.postMessage({ error: String(error) });
  }
  timer = setTimeout(checkpoint, intervalMs);
}

/**
 * SQLite starts the WAL over only when a write begins after a checkpoint has
 * copied every frame and no reader still reads from the WAL. Under constant
 * writes a PASSIVE pass never gets there (commits land while it copies and
 * fsyncs), and the file would grow without end. So past the limit, passes
 * repeat, each copying what was committed during the one before, until one
 * finds few new frames; then a RESTART checkpoint copies the rest holding the
 * write lock, with its two fsyncs (writers wait up to a few milliseconds), and
 * starts the WAL over. With a
 * writer or reader active at that moment it copies what it can and gives up,
 * and the next tick tries again. The file keeps its largest size and is reused.
 */
function startOver(log) {
  let last = log;
  for (let pass = 0; pass < MAX_PASSES; pass++) {
    const [{ log: now }] = db.pragma("wal_checkpoint(PASSIVE)");
    const fresh = now - last;
    last = now;
    if (fresh < FEW_FRAMES) break;
  }
  db.pragma("wal_checkpoint(RESTART)");
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
