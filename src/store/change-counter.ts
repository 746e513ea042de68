import type { Db } from "./database.js";

/** The tables whose changes a counter of `change_counters` counts (migrations 7 and 17). */
export type CountedChanges = "api_keys" | "category_weights";

/**
 * What a repository read from tables a change counter counts (a row of
 * `change_counters`, which triggers bump on every change to them, by any
 * connection or process), kept in memory while the counter stands still.
 *
 * The counter itself is read at most once per event-loop turn. Every decide
 * and analyze asks whether the keys and the weights changed; the requests of
 * one turn arrived together, and one reading serves them all. A change
 * committed elsewhere (fraudctl, another process) is seen from the next turn
 * on; one made through this connection by the repository that owns the cache
 * is seen at once, as it calls {@link forget} after it.
 */
export class CountedCache<K, V extends object | null> {
  private readonly counterStmt;
  /** The counter as read this turn; undefined until it is read (again). */
  private counterThisTurn: number | undefined;
  private readonly entries = new Map<K, V>();
  /** The counter when `entries` were read. */
  private entriesAt = -1;

  constructor(
    db: Db,
    private readonly counted: CountedChanges,
    /** Past this many entries the cache starts over (a flood of distinct keys must not grow it without bound). */
    private readonly maxEntries = Number.POSITIVE_INFINITY,
  ) {
    this.counterStmt = db.prepare<[CountedChanges], number>("SELECT value FROM change_counters WHERE name = ?").pluck();
  }

  /** What is kept for `key` since the counter last moved, else what `read` gives, kept. */
  get(key: K, read: () => V): V {
    const changes = this.counter();
    if (changes !== this.entriesAt || this.entries.size > this.maxEntries) {
      this.entries.clear();
      this.entriesAt = changes;
    }
    const kept = this.entries.get(key);
    if (kept !== undefined) return kept;
    const value = read();
    this.entries.set(key, value);
    return value;
  }

  /** The next {@link get} reads the counter again: a change was just made, or a write found the reading stale. */
  forget(): void {
    this.counterThisTurn = undefined;
  }

  private counter(): number {
    if (this.counterThisTurn === undefined) {
      this.counterThisTurn = this.counterStmt.get(this.counted) as number;
      setImmediate(() => this.forget());
    }
    return this.counterThisTurn;
  }
}
