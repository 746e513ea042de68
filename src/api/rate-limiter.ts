import type { Clock } from "../clock.js";

/** One limit applied to one identity: `limit` calls per `windowMs`. */
export interface RateLimitCheck {
  /** Rule name, as in the contract (decide, analyze, feedback_hourly, ...). */
  name: string;
  /** The identity counted: a key id, an IP address, an account. */
  key: string;
  limit: number;
  windowMs: number;
}

export interface RateLimitState {
  name: string;
  limit: number;
  windowSeconds: number;
  /** Calls still admitted now. */
  remaining: number;
  /** Seconds until the count drops enough to admit another call. */
  resetSeconds: number;
}

export interface RateLimitOutcome {
  allowed: boolean;
  /** When refused: whole seconds to wait before retrying (Retry-After). */
  retryAfterSeconds: number;
  states: RateLimitState[];
}

interface Window {
  start: number;
  windowMs: number;
  current: number;
  previous: number;
}

/**
 * Sliding-window counter: each identity keeps the counts of the current and the
 * previous fixed window, and the previous one is weighted by how much of it
 * still overlaps the sliding window. O(1) time and memory per identity, and
 * exact at window boundaries for the burst case that matters (N calls admitted,
 * call N+1 refused). One instance serves every limit in the contract.
 */
export class RateLimiter {
  private readonly windows = new Map<string, Window>();
  private checksSinceSweep = 0;

  constructor(
    private readonly clock: Clock,
    private readonly maxTrackedKeys = 200_000,
  ) {}

  /** Admits the call only if every check admits it, and only then counts it. */
  consume(checks: readonly RateLimitCheck[]): RateLimitOutcome {
    const now = this.clock.now();
    const entries = checks.map((check) => ({ check, window: this.windowFor(check, now) }));
    const allowed = entries.every(({ check, window }) => estimate(window, check, now) < check.limit);
    if (allowed) for (const { window } of entries) window.current++;
    let retryAfterSeconds = 0;
    const states = entries.map(({ check, window }) => {
      const used = estimate(window, check, now);
      const wait = used < check.limit ? 0 : waitMs(window, check, now);
      if (!allowed) retryAfterSeconds = Math.max(retryAfterSeconds, Math.ceil(wait / 1000));
      return {
        name: check.name,
        limit: check.limit,
        windowSeconds: Math.round(check.windowMs / 1000),
        remaining: Math.max(0, check.limit - used),
        resetSeconds: Math.ceil(wait / 1000),
      };
    });
    this.sweepOccasionally(now);
    return { allowed, retryAfterSeconds: allowed ? 0 : Math.max(1, retryAfterSeconds), states };
  }

  private windowFor(check: RateLimitCheck, now: number): Window {
    const id = `${check.name}\u0000${check.key}`;
    const start = now - (now % check.windowMs);
    let window = this.windows.get(id);
    if (!window) {
      window = { start, windowMs: check.windowMs, current: 0, previous: 0 };
      this.windows.set(id, window);
    } else if (window.start !== start) {
      window.previous = start - window.start === check.windowMs ? window.current : 0;
      window.current = 0;
      window.start = start;
    }
    return window;
  }

  /** Drops identities idle for two windows, and the oldest ones past the cap. */
  private sweepOccasionally(now: number): void {
    if (++this.checksSinceSweep < 10_000 && this.windows.size <= this.maxTrackedKeys) return;
    this.checksSinceSweep = 0;
    for (const [id, window] of this.windows) {
      if (now - window.start > 2 * window.windowMs) this.windows.delete(id);
    }
    for (const id of this.windows.keys()) {
      if (this.windows.size <= this.maxTrackedKeys) break;
      this.windows.delete(id);
    }
  }
}

function estimate(window: Window, check: RateLimitCheck, now: number): number {
  const elapsed = now - window.start;
  return Math.floor(window.previous * (1 - elapsed / check.windowMs)) + window.current;
}

/** Milliseconds until `estimate` drops below the limit, with no further calls. */
function waitMs(window: Window, check: RateLimitCheck, now: number): number {
  const elapsed = now - window.start;
  const { limit, windowMs } = check;
  if (window.current < limit) {
    // The previous window's weight must decay until previous*(1-e/W) < limit-current.
    const mustReach = windowMs * (1 - (limit - window.current) / window.previous);
    return Math.max(1, mustReach - elapsed + 1);
  }
  // Wait for the next window, then for this window's count (now "previous") to decay.
  return windowMs - elapsed + windowMs * (1 - limit / window.current) + 1;
}
