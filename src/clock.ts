/**
 * Time source. Everything that depends on time (key rotation windows, rate
 * limits, retries) reads it from here, so tests move time instead of sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
