import { describe, expect, it } from "vitest";
import {
  MAX_ATTEMPTS,
  MAX_RETRY_AFTER_MS,
  nextAttempt,
  parseRetryAfter,
  RETRY_DELAYS_MS,
} from "../../src/webhooks/delivery-policy.js";
import type { AttemptOutcome, NextStep } from "../../src/webhooks/delivery-policy.js";
import { ManualClock } from "../helpers/clock.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

/**
 * Plays a delivery against a receiver that answers `answer(attempt)`, moving
 * the clock to each retry time; returns when each attempt ran and how it ended.
 */
function simulate(answer: (attempt: number) => AttemptOutcome, options = {}) {
  const clock = new ManualClock();
  const start = clock.now();
  const attemptsAt: number[] = [];
  for (let attempt = 1; ; attempt++) {
    attemptsAt.push(clock.now() - start);
    const step = nextAttempt(attempt, answer(attempt), clock.now(), options);
    if (step.kind !== "retry") return { attemptsAt, step };
    expect(step.at).toBeGreaterThan(clock.now());
    clock.advance(step.at - clock.now());
  }
}

describe("retry schedule", () => {
  it("makes nine attempts over about a day, then dead-letters", () => {
    const { attemptsAt, step } = simulate(() => ({ status: 503 }));
    expect(MAX_ATTEMPTS).toBe(9);
    expect(attemptsAt).toEqual([
      0,
      10 * SECOND,
      1 * MINUTE + 10 * SECOND,
      6 * MINUTE + 10 * SECOND,
      36 * MINUTE + 10 * SECOND,
      2 * HOUR + 36 * MINUTE + 10 * SECOND,
      7 * HOUR + 36 * MINUTE + 10 * SECOND,
      15 * HOUR + 36 * MINUTE + 10 * SECOND,
      23 * HOUR + 36 * MINUTE + 10 * SECOND,
    ]);
    expect(step).toEqual({ kind: "dead-letter", reason: "attempts_exhausted", detail: "HTTP 503 on attempt 9" });
  });

  it("stops as soon as an attempt succeeds", () => {
    const { attemptsAt, step } = simulate((attempt) => (attempt < 4 ? { error: "timeout" } : { status: 204 }));
    expect(attemptsAt).toHaveLength(4);
    expect(step).toEqual({ kind: "delivered" });
  });

  it("treats every 2xx as delivered", () => {
    for (const status of [200, 201, 202, 204, 299]) expect(nextAttempt(1, { status }, 0).kind).toBe("delivered");
  });

  it("retries failures without a response, reporting the last error when giving up", () => {
    expect(nextAttempt(1, { error: "connection_refused" }, 0)).toEqual({ kind: "retry", at: 10 * SECOND });
    expect(nextAttempt(MAX_ATTEMPTS, { error: "timeout" }, 0)).toEqual({
      kind: "dead-letter",
      reason: "attempts_exhausted",
      detail: "timeout on attempt 9",
    });
    expect(nextAttempt(1, {}, 0)).toEqual({ kind: "retry", at: 10 * SECOND });
  });

  it("adds up to 10% jitter from the random source it is given, and none without one", () => {
    expect(nextAttempt(2, { status: 500 }, 0, { random: () => 0.5 })).toEqual({ kind: "retry", at: MINUTE + 3 * SECOND });
    expect(nextAttempt(2, { status: 500 }, 0, { random: () => 0.999999 })).toEqual({ kind: "retry", at: MINUTE + 5999 });
    const { attemptsAt } = simulate(() => ({ status: 500 }), { random: () => 0.999999 });
    expect(attemptsAt.at(-1)).toBeLessThan(26 * HOUR);
  });
});

describe("answers that end or change the schedule", () => {
  it("disables the endpoint on 410 Gone, whatever the attempt", () => {
    expect(nextAttempt(1, { status: 410 }, 0)).toEqual({ kind: "disable-endpoint" });
    expect(nextAttempt(MAX_ATTEMPTS, { status: 410 }, 0)).toEqual({ kind: "disable-endpoint" });
  });

  it("dead-letters at once on 4xx answers that the same body would get again", () => {
    for (const status of [400, 405, 411, 413, 415, 422, 431, 451]) {
      expect(nextAttempt(1, { status }, 0), String(status)).toEqual({
        kind: "dead-letter",
        reason: "rejected",
        detail: `HTTP ${status}`,
      });
    }
  });

  it("retries timeouts, conflicts, rate limits and receiver set-up errors, redirects and server errors", () => {
    for (const status of [401, 403, 404, 408, 409, 425, 429, 500, 502, 503, 504, 301, 302, 307, 100]) {
      expect(nextAttempt(1, { status }, 0).kind, String(status)).toBe("retry");
    }
  });
});

describe("Retry-After", () => {
  const now = Date.UTC(2026, 10, 21, 12, 0, 0);
  const retryAt = (retryAfterHeader: string, attempt = 1): NextStep =>
    nextAttempt(attempt, { status: 429, retryAfterHeader }, now);

  it("lengthens the wait to what the receiver asks, in seconds or as an HTTP-date", () => {
    expect(retryAt("120")).toEqual({ kind: "retry", at: now + 120 * SECOND });
    expect(retryAt("Sat, 21 Nov 2026 12:15:00 GMT")).toEqual({ kind: "retry", at: now + 15 * MINUTE });
  });

  it("never shortens the scheduled wait", () => {
    expect(retryAt("1", 4)).toEqual({ kind: "retry", at: now + 30 * MINUTE });
    expect(retryAt("Sat, 21 Nov 2026 11:00:00 GMT")).toEqual({ kind: "retry", at: now + 10 * SECOND });
  });

  it("is capped at an hour", () => {
    expect(retryAt("86400")).toEqual({ kind: "retry", at: now + MAX_RETRY_AFTER_MS });
    expect(retryAt("Sun, 22 Nov 2026 12:00:00 GMT")).toEqual({ kind: "retry", at: now + HOUR });
    // A longer scheduled wait is kept.
    expect(retryAt("86400", 7)).toEqual({ kind: "retry", at: now + 8 * HOUR });
  });

  it("is ignored when it cannot be read, and does not extend the number of attempts", () => {
    expect(retryAt("soon")).toEqual({ kind: "retry", at: now + 10 * SECOND });
    expect(retryAt("-5")).toEqual({ kind: "retry", at: now + 10 * SECOND });
    expect(nextAttempt(MAX_ATTEMPTS, { status: 503, retryAfterHeader: "10" }, now).kind).toBe("dead-letter");
  });

  it("keeps a receiver that always asks for an hour within 30 hours", () => {
    const { attemptsAt } = simulate(() => ({ status: 503, retryAfterHeader: "3600" }));
    expect(attemptsAt).toHaveLength(MAX_ATTEMPTS);
    expect(attemptsAt.at(-1)).toBe(27 * HOUR);
  });

  it("parses delay-seconds and the three forms of an HTTP-date", () => {
    expect(parseRetryAfter(" 0 ", now)).toBe(0);
    expect(parseRetryAfter("3", now)).toBe(3000);
    expect(parseRetryAfter("Sat, 21 Nov 2026 12:00:30 GMT", now)).toBe(30 * SECOND);
    // The obsolete RFC 850 and asctime forms, which a recipient must still read (RFC 9110, 5.6.7).
    expect(parseRetryAfter("Saturday, 21-Nov-26 12:00:40 GMT", now)).toBe(40 * SECOND);
    // Its two-digit year is in this century unless that is more than 50 years ahead (then the one before):
    // 75 is 2075, a wait nextAttempt caps; 80 would be 2080, 54 years ahead, so it is 1980, past.
    expect(parseRetryAfter("Thursday, 21-Nov-75 12:00:00 GMT", now)).toBe(Date.UTC(2075, 10, 21, 12) - now);
    expect(parseRetryAfter("Thursday, 21-Nov-80 12:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("Sat Nov 21 12:00:50 2026", now)).toBe(50 * SECOND);
    expect(parseRetryAfter("Sun Nov  1 12:00:00 2026", now)).toBe(0);
    expect(parseRetryAfter("1763726430", now)).toBe(1763726430 * SECOND);
    for (const junk of ["", "1.5", "2026-11-21T12:00:30Z", "tomorrow", "Sat, 99 Nov 2026 12:00:30 GMT", "Sat Nov 21 12:00:50 2026 PST", "Nov 21 2026"]) {
      expect(parseRetryAfter(junk, now), junk).toBeUndefined();
    }
  });

  it("documents a schedule that matches the exported delays", () => {
    expect(RETRY_DELAYS_MS.reduce((sum, delay) => sum + delay, 0)).toBe(23 * HOUR + 36 * MINUTE + 10 * SECOND);
  });
});
