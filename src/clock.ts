/**
 * Time source. Everything that depends on time (key rotation windows, rate
 * limits, retries) reads it from here, so tests move time instead of sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** The longest a Node.js timer waits (2³¹ − 1 ms, about 24.8 days): a longer one fires after 1 ms instead. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
