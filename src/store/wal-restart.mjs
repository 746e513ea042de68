// When and how the checkpointer (checkpoint-worker.mjs) starts the WAL over,
// apart from SQLite itself, so that tests can drive it with scripted
// checkpoint results. Plain JavaScript for the same reason as the worker.

/** Passes per tick looking for a moment when the WAL is wholly copied and a RESTART goes through. */
export const MAX_PASSES = 24;
/** RESTART attempts per tick at such moments (each takes the write lock for an instant when it is free). */
export const MAX_RESTART_ATTEMPTS = 4;
/** How long the thread waits after a busy RESTART before it looks again. */
export const BUSY_PAUSE_MS = 1;

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
 * commit while the writer is in the middle of a transaction. The RESTART then
 * finds the write lock taken, falls back to a passive pass (with nothing to
 * copy) and reports busy, as it does when a reader still reads from the WAL.
 * So after a busy RESTART the thread waits a millisecond, for that
 * transaction or read to end, and looks again, up to {@link MAX_RESTART_ATTEMPTS}
 * times a tick. (In a logged run at 1,000 decides a second, every one of the
 * four restarts tried without this gave up, and the WAL reached the hard
 * limit every few seconds; with it, the first attempt was busy in half the
 * ticks and the second went through.)
 *
 * Without a restart in this tick the next tick looks again; only past the
 * hard limit does the RESTART copy and sync under the lock, at once, without
 * more passes (its cost is the fsyncs, not the frames left to copy). The
 * looking costs this thread's time and disk writes: passes that find a few
 * new frames each copy and fsync them.
 *
 * `wal` runs the checkpoints: `passive()` and `restart()` return SQLite's
 * `log` and `checkpointed` frame counts (and `busy` for the restart),
 * `pause(ms)` blocks the thread. Returns the frames the WAL holds afterwards
 * (0 when the restart went through: the next commit starts it over).
 */
export function startOver(wal, first, forceRestartAboveFrames) {
  let pass = first;
  let attempts = 0;
  // Past the hard limit there is nothing left to wait for: the restart goes ahead at once.
  for (let n = 1; n < MAX_PASSES && attempts < MAX_RESTART_ATTEMPTS && pass.log <= forceRestartAboveFrames; n++) {
    const before = pass.log;
    pass = wal.passive();
    // Nothing committed since the pass before, and all of it copied.
    const quiet = pass.log === before && pass.checkpointed === pass.log;
    if (!quiet) continue;
    attempts++;
    const restart = wal.restart();
    if (!restart.busy) return 0;
    pass = { log: restart.log, checkpointed: restart.checkpointed };
    wal.pause(BUSY_PAUSE_MS);
  }
  if (pass.log <= forceRestartAboveFrames) return pass.log;
  const restart = wal.restart();
  return restart.busy ? restart.log : 0;
}
