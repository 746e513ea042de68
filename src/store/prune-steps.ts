/**
 * Background deletes of rows past their time are made a step at a time: each step is a short transaction of
 * its own, so that it holds the database's one write lock (which every decide's writer needs) for
 * milliseconds, and the event loop turns between steps, so that the request thread keeps answering.
 */

/** Rows one step deletes at most. */
export const PRUNE_STEP_ROWS = 1_000;

/** Lets the event loop run what waits (answers, timers) before the next step. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Runs `step` (one DELETE of at most PRUNE_STEP_ROWS rows, returning how many it deleted) until a step
 * deletes fewer, or `stopped` says so between steps; returns how many rows were deleted in all.
 */
export async function pruneInSteps(step: () => number, stopped: () => boolean): Promise<number> {
  let deleted = 0;
  for (;;) {
    const changes = step();
    deleted += changes;
    if (changes < PRUNE_STEP_ROWS) return deleted;
    await nextTurn();
    if (stopped()) return deleted;
  }
}
