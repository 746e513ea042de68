import type { Clock } from "../clock.js";

/** One limit applied to one identity: `limit` calls per `windowMs`. */
export interface RateLimitCheck {
  /** Rule name, as in the contract (decide, analyze, feedback_hourly, ...). */
  name: string;
  /** The identity counted: a key id, an IP address, an account. */
  key: string;
  limit: number;
  windowMs: number;
  /**
   * The identity is one of a set clients can grow at will (their networks): past `maxTrackedKeys` such
   * identities it may be forgotten. Keys and accounts, which only the operator creates, are never forgotten
   * while a call of theirs is in the window: a flood of new networks would otherwise reset their counts.
   */
  evictable?: boolean;
}

export interface RateLimitState {
  name: string;
  limit: number;
  windowSeconds: number;
  /** Calls still admitted now. */
  remaining: number;
  /**
   * Seconds until a counted call leaves the window, freeing one (the next
   * that `remaining` grows by); 0 when none is counted.
   */
  resetSeconds: number;
}

export interface RateLimitOutcome {
  allowed: boolean;
  /** When the call was counted (admitted): what {@link RateLimiter.release} takes back. */
  admittedAt: number;
  /** When refused: whole seconds to wait before retrying (Retry-After). */
  retryAfterSeconds: number;
  states: RateLimitState[];
}

/**
 * The admission times of one identity's calls still inside its window, oldest
 * first, in a ring that grows (up to the limit) only as calls come: a high
 * limit costs nothing until an identity makes that many calls in one window.
 */
class CallLog {
  private times = new Float64Array(4);
  private oldest = 0;
  size = 0;
  /** Used again since it was last passed over for eviction (its second chance; see `RateLimiter`). */
  usedAgain = false;
  /** No longer tracked: the sweep or an eviction dropped it. */
  dropped = false;

  constructor(
    readonly id: string,
    readonly windowMs: number,
    readonly evictable: boolean,
  ) {}

  /** Forgets the calls that have left the window ending now. */
  prune(now: number): void {
    while (this.size > 0 && (this.times[this.oldest] as number) <= now - this.windowMs) {
      this.oldest = (this.oldest + 1) % this.times.length;
      this.size--;
    }
  }

  add(now: number, limit: number): void {
    if (this.size === this.times.length) this.grow(limit);
    this.times[(this.oldest + this.size) % this.times.length] = now;
    this.size++;
  }

  /** Forgets the latest call admitted at `at`, if it is still in the log. */
  remove(at: number): void {
    for (let i = this.size - 1; i >= 0; i--) {
      if (this.times[(this.oldest + i) % this.times.length] !== at) continue;
      for (let j = i; j < this.size - 1; j++) {
        this.times[(this.oldest + j) % this.times.length] = this.times[(this.oldest + j + 1) % this.times.length] as number;
      }
      this.size--;
      return;
    }
  }

  /** Milliseconds until another call is admitted: 0 while fewer than `limit` are counted. */
  waitMs(now: number, limit: number): number {
    return this.size < limit ? 0 : this.freesInMs(now, limit);
  }

  /**
   * Milliseconds until the next counted call leaves the window, freeing one: the oldest of the last `limit`
   * (a limit lowered meanwhile may leave more than that counted); 0 when none is counted.
   */
  freesInMs(now: number, limit: number): number {
    if (this.size === 0) return 0;
    const freeing = this.times[(this.oldest + Math.max(0, this.size - limit)) % this.times.length] as number;
    return Math.max(1, freeing + this.windowMs - now);
  }

  private grow(limit: number): void {
    const grown = new Float64Array(Math.max(this.size + 1, Math.min(limit, this.times.length * 2)));
    for (let i = 0; i < this.size; i++) grown[i] = this.times[(this.oldest + i) % this.times.length] as number;
    this.times = grown;
    this.oldest = 0;
  }
}

/**
 * A sliding log: each identity keeps the times of its calls in the last
 * window, so a call is admitted exactly when fewer than `limit` calls were
 * admitted in the `windowMs` before it. No window of that length ever holds
 * more than `limit` calls, even for a burst across a clock-minute boundary,
 * and Retry-After is the exact wait. An identity's memory grows with the most
 * calls it had in one window (never past the limit) and is given back when
 * none is left in it (the sweep drops the identity); time O(1) amortised.
 *
 * Past `maxTrackedKeys` evictable identities (client networks), one of them
 * is forgotten for each new one: the oldest tracked that has not been used
 * again since it was last passed over (a second chance, as a CLOCK page cache
 * gives one), so that a flood of new identities costs O(1) a call and does not
 * reset an identity that keeps calling. Keys and accounts are not evictable:
 * the operator bounds how many there are, and a flood of networks must not
 * forget the count of one that used up its quota and waits for its window.
 * The order is an array of its own: reordering a Map of this size (delete and
 * set again) costs tens of microseconds a time in V8.
 *
 * One instance serves every limit in the contract.
 */
export class RateLimiter {
  private readonly logs = new Map<string, CallLog>();
  /** Every tracked evictable log, oldest first from `head`, and logs the sweep has dropped (skipped when reached, removed by the sweep). */
  private order: CallLog[] = [];
  /** Evictable logs tracked (in `logs`): what `maxTrackedKeys` bounds. */
  private evictableTracked = 0;
  private head = 0;
  private checksSinceSweep = 0;

  constructor(
    private readonly clock: Clock,
    private readonly maxTrackedKeys = 200_000,
  ) {}

  /** Admits the call only if every check admits it, and only then counts it. */
  consume(checks: readonly RateLimitCheck[]): RateLimitOutcome {
    const now = this.clock.now();
    const entries = checks.map((check) => ({ check, log: this.logFor(check, now) }));
    const allowed = entries.every(({ check, log }) => log.size < check.limit);
    if (allowed) for (const { check, log } of entries) log.add(now, check.limit);
    this.sweepOccasionally(now);
    return this.outcome(entries, allowed, now);
  }

  /**
   * Takes back a call `consume` counted (`outcome.admittedAt`), for one refused as invalid after it was
   * admitted, which must not use up the caller's allowance; returns the state the answer should report.
   */
  release(checks: readonly RateLimitCheck[], admittedAt: number): RateLimitOutcome {
    const now = this.clock.now();
    const entries = checks.map((check) => ({ check, log: this.logFor(check, now) }));
    for (const { log } of entries) log.remove(admittedAt);
    return this.outcome(entries, true, admittedAt);
  }

  private outcome(entries: ReadonlyArray<{ check: RateLimitCheck; log: CallLog }>, allowed: boolean, admittedAt: number): RateLimitOutcome {
    const now = this.clock.now();
    let retryAfterSeconds = 0;
    const states = entries.map(({ check, log }) => {
      const wait = log.waitMs(now, check.limit);
      if (!allowed) retryAfterSeconds = Math.max(retryAfterSeconds, Math.ceil(wait / 1000));
      return {
        name: check.name,
        limit: check.limit,
        windowSeconds: Math.round(check.windowMs / 1000),
        remaining: Math.max(0, check.limit - log.size),
        resetSeconds: Math.ceil(log.freesInMs(now, check.limit) / 1000),
      };
    });
    return { allowed, admittedAt, retryAfterSeconds: allowed ? 0 : Math.max(1, retryAfterSeconds), states };
  }

  private logFor(check: RateLimitCheck, now: number): CallLog {
    const id = `${check.name}\u0000${check.key}`;
    let log = this.logs.get(id);
    if (log) log.usedAgain = true;
    else {
      log = new CallLog(id, check.windowMs, check.evictable ?? false);
      this.logs.set(id, log);
      if (log.evictable) {
        this.order.push(log);
        this.evictableTracked++;
      }
    }
    log.prune(now);
    return log;
  }

  /** Every 10,000 checks, drops the identities with no call left in their window; past the cap, evicts. */
  private sweepOccasionally(now: number): void {
    if (++this.checksSinceSweep >= 10_000) {
      this.checksSinceSweep = 0;
      let dropped = 0;
      for (const [id, log] of this.logs) {
        log.prune(now);
        if (log.size > 0) continue;
        this.logs.delete(id);
        log.dropped = true;
        if (log.evictable) this.evictableTracked--;
        dropped++;
      }
      if (dropped > 0) {
        this.order = this.order.slice(this.head).filter((log) => !log.dropped);
        this.head = 0;
      }
    }
    while (this.evictableTracked > this.maxTrackedKeys && this.head < this.order.length) {
      const log = this.order[this.head++] as CallLog;
      if (log.dropped) continue;
      if (log.usedAgain) {
        log.usedAgain = false;
        this.order.push(log);
      } else {
        this.logs.delete(log.id);
        log.dropped = true;
        this.evictableTracked--;
      }
    }
    if (this.head > 1_024 && this.head * 2 > this.order.length) {
      this.order = this.order.slice(this.head);
      this.head = 0;
    }
  }
}
