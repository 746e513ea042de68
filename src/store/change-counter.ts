import type { Db } from "./database.js";

/** The tables whose changes a counter of `change_counters` counts (migrations 7 and 17). */
export type CountedChanges = "api_keys" | "category_weights";

/**
 * A change counter (a row of `change_counters`, which triggers bump on every
 * change to its tables, by any connection or process), read at most once per
 * event-loop turn. Every decide and analyze asks whether the keys and the
 * weights changed; the requests of one turn arrived together, and one
 * reading serves them all. A change committed elsewhere (fraudctl, another
 * thread) is seen from the next turn on; one made through this connection by
 * the repository that reads the counter is seen at once, as it calls
 * {@link forget} after it.
 */
export class ChangeCounter {
  private readonly readStmt;
  private value: number | undefined;

  constructor(
    db: Db,
    private readonly name: CountedChanges,
  ) {
    this.readStmt = db.prepare<[CountedChanges], number>("SELECT value FROM change_counters WHERE name = ?").pluck();
  }

  /** The counter as read this turn (read now if it was not yet). */
  current(): number {
    if (this.value === undefined) {
      this.value = this.readStmt.get(this.name) as number;
      setImmediate(() => this.forget());
    }
    return this.value;
  }

  /** The next {@link current} reads the counter again: a change was just made, or a write found the reading stale. */
  forget(): void {
    this.value = undefined;
  }
}
