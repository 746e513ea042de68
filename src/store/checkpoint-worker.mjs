// Moves WAL checkpoints (and their fsyncs) off the request thread: the server's
// own connection has auto-checkpointing off, and this thread checkpoints on a
// timer through a connection of its own. Plain JavaScript, as it needs no types
// and runs in a worker thread without a TypeScript loader.
import { parentPort, workerData } from "node:worker_threads";
import Database from "./sqlite-driver.cjs";
import { nameThread } from "../observability/thread-name.cjs";

const { file, intervalMs, restartAboveFrames, forceRestartAboveFrames } = workerData;
nameThread("fraud-wal");
/** Passes per tick looking for a moment when the WAL is wholly copied and a RESTART goes through. */
const MAX_PASSES = 24;
/** How long a RESTART that found the write lock taken (or a reader in the WAL) waits before the next look. */
const BUSY_PAUSE_MS = 1;
const pause = new Int32Array(new SharedArrayBuffer(4));
/** Ticks in a row past the hard limit without starting over before the thread says so (5 s at 200 ms). */
const STUCK_TICKS = 25;

const db = new Database(file);
// Never waits for a lock: a checkpoint that would have to wait for a writer or a reader
// copies what it can now, and the next tick tries again.
db.pragma("busy_timeout = 0");

/** One PASSIVE pass: copies what no reader still needs, never blocks anyone. */
function passive() {
  const [{ log, checkpointed }] = db.pragma("wal_checkpoint(PASSIVE)");
  return { log, checkpointed };
}

/** Ticks in a row that ended past the hard limit; the warning goes once per such stretch. */
let stuckTicks = 0;

function checkpoint() {
  try {
    const pass = passive();
    const frames = pass.log > restartAboveFrames ? startOver(pass) : pass.log;
    stuckTicks = frames > forceRestartAboveFrames ? stuckTicks + 1 : 0;
    if (stuckTicks === STUCK_TICKS) {
      // A reader that never finishes (or a writer that never pauses) keeps even the forced restart out.
      parentPort?.postMessage({ warning: "the WAL cannot start over: a reader or writer holds it past the hard limit", frames });
    }
  } catch (error) {
    parentPort?.postMessage({ error: String(error) });
  }
  timer = setTimeout(checkpoint, intervalMs);
}

/**
 * SQLite starts the WAL over only when a write begins after a checkpoint has
 * copied every frame and no reader still reads from the WAL. Under constant
 * writes a PASSIVE pass rarely gets there (commits land while it copies and
 * fsyncs), and the file would grow without end.
 *
 * A RESTART checkpoint gets there by holding the write lock while it copies
 * what is left, with an fsync of the WAL and one of the database: 7 to 38 ms
 * of stalled commits on the development machine, however few the frames,
 * since the fsyncs dominate (docs/benchmarks.md). So past the limit, passes
 * repeat until one finds nothing committed since the pass before and all of
 * it copied, a moment between two commits: a RESTART then has nothing to copy
 * or sync, holds the lock for microseconds, and makes sure the next commit
 * starts the WAL over (SQLite would do that itself at such a moment, but not
 * when a reader that began earlier is still reading).
 *
 * Such a moment is often not free: two passes microseconds apart see no new
 * commit while the writer is in the middle of a transaction, and the RESTART
 * then finds the write lock taken and gives up at once, as it does when a
 * reader still reads from the WAL. So after a busy RESTART the thread waits a
 * millisecond, for that transaction or read to end, and looks again (at 1,000
 * decides a second the first attempt was busy about half the time, and
 * without another the WAL reached the hard limit every few seconds).
 *
 * Without such a moment in this tick the next tick looks again; only past
 * the hard limit does the RESTART copy and sync under the lock, at once,
 * without more passes (its cost is the fsyncs, not the frames left to copy).
 * The file keeps its largest size and is reused. The looking costs disk
 * writes only: passes that find a few new frames each copy and fsync them, on
 * this thread. Returns the frames the WAL holds afterwards (0 when the
 * restart went through: the next commit starts it over).
 */
function startOver(first) {
  let pass = first;
  // Past the hard limit there is nothing left to wait for: the restart goes ahead at once.
  for (let n = 1; n < MAX_PASSES && pass.log <= forceRestartAboveFrames; n++) {
    const before = pass.log;
    pass = passive();
    // Nothing committed since the pass before, and all of it copied.
    const quiet = pass.log === before && pass.checkpointed === pass.log;
    if (!quiet) continue;
    const [restart] = db.pragma("wal_checkpoint(RESTART)");
    if (!restart.busy) return 0;
    pass = { log: restart.log, checkpointed: restart.checkpointed };
    Atomics.wait(pause, 0, 0, BUSY_PAUSE_MS);
  }
  if (pass.log <= forceRestartAboveFrames) return pass.log;
  const [restart] = db.pragma("wal_checkpoint(RESTART)");
  return restart.busy ? restart.log : 0;
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
