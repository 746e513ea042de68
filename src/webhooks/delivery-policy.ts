// When to try a webhook delivery again, and when to stop. Pure: the caller
// makes the HTTP request, reports what happened and the time, and stores the
// answer (next attempt time, dead letter, or endpoint disabled).

/** Each attempt is abandoned (and counts as failed) after this long without a complete response. */
export const ATTEMPT_TIMEOUT_MS = 10_000;

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

/**
 * Wait after each failed attempt: after attempt 1 wait 10 s, after attempt 2
 * wait 1 min, and so on. Nine attempts in all; the last comes 23 h 36 min 10 s
 * after the first, so a receiver down for most of a day still gets the event.
 */
export const RETRY_DELAYS_MS: readonly number[] = [
  10 * SECOND,
  1 * MINUTE,
  5 * MINUTE,
  30 * MINUTE,
  2 * HOUR,
  5 * HOUR,
  8 * HOUR,
  8 * HOUR,
];

export const MAX_ATTEMPTS = RETRY_DELAYS_MS.length + 1;

/**
 * Longest wait a Retry-After header can impose. It only ever lengthens a wait,
 * and the cap keeps one receiver's header from parking a delivery for days:
 * with it, the whole schedule (jitter included) still ends within 30 hours.
 */
export const MAX_RETRY_AFTER_MS = 1 * HOUR;

/**
 * Up to this fraction is added to each wait when a random source is given,
 * so the retries of many deliveries that failed together spread out.
 */
export const JITTER_FRACTION = 0.1;

/**
 * 4xx answers that say "not now" rather than "never": timeout, conflict, too
 * early, too many requests; and the ones that come from the receiver's set-up
 * (authentication, routing) rather than from the payload, which are usually
 * fixed within the day the schedule covers.
 */
const RETRYABLE_CLIENT_ERRORS: ReadonlySet<number> = new Set([401, 403, 404, 408, 409, 425, 429]);

/** What one attempt produced: a status when a response arrived, otherwise why not. */
export interface AttemptOutcome {
  status?: number | undefined;
  /** The response's Retry-After header, as received. */
  retryAfterHeader?: string | undefined;
  /** Why no response arrived: "timeout", "connection_refused", "address_blocked", ... */
  error?: string | undefined;
}

export type DeadLetterReason = "attempts_exhausted" | "rejected";

export type NextStep =
  | { kind: "delivered" }
  | { kind: "retry"; at: number }
  | { kind: "dead-letter"; reason: DeadLetterReason; detail: string }
  | { kind: "disable-endpoint" };

export interface PolicyOptions {
  /**
   * Random source in [0, 1) for jitter; without it there is none, so tests are
   * deterministic. The service passes Math.random (app.ts, through registerHttpDelivery).
   */
  random?: (() => number) | undefined;
}

/**
 * Decides what follows attempt `attemptNumber` (1 for the first) that ended
 * at `now` (ms) with `outcome`:
 * - 2xx: delivered;
 * - 410 Gone: disable the endpoint (the caller also dead-letters this delivery);
 * - another 4xx outside RETRYABLE_CLIENT_ERRORS: dead-letter at once, because
 *   the identical body would get the identical answer;
 * - anything else (no response, timeout, 1xx/3xx since redirects are not
 *   followed, retryable 4xx, 5xx): retry after the scheduled wait, stretched
 *   to a later Retry-After (capped), until MAX_ATTEMPTS have been made.
 */
export function nextAttempt(
  attemptNumber: number,
  outcome: AttemptOutcome,
  now: number,
  options: PolicyOptions = {},
): NextStep {
  const status = outcome.status;
  if (status !== undefined && status >= 200 && status <= 299) return { kind: "delivered" };
  if (status === 410) return { kind: "disable-endpoint" };
  const detail = status !== undefined ? `HTTP ${status}` : (outcome.error ?? "no response");
  if (status !== undefined && status >= 400 && status <= 499 && !RETRYABLE_CLIENT_ERRORS.has(status)) {
    return { kind: "dead-letter", reason: "rejected", detail };
  }
  const scheduled = RETRY_DELAYS_MS[attemptNumber - 1];
  if (scheduled === undefined) {
    return { kind: "dead-letter", reason: "attempts_exhausted", detail: `${detail} on attempt ${attemptNumber}` };
  }
  const jittered = scheduled + Math.floor(scheduled * JITTER_FRACTION * (options.random?.() ?? 0));
  const asked = outcome.retryAfterHeader === undefined ? undefined : parseRetryAfter(outcome.retryAfterHeader, now);
  const wait = asked === undefined ? jittered : Math.max(jittered, Math.min(asked, MAX_RETRY_AFTER_MS));
  return { kind: "retry", at: now + wait };
}

/** The three forms of an HTTP-date a recipient must read (RFC 9110, 5.6.7); the last two are obsolete. */
const IMF_FIXDATE = /^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const RFC850_DATE = /^[A-Za-z]{6,9}, (\d{2})-([A-Za-z]{3})-(\d{2}) (\d{2}:\d{2}:\d{2}) GMT$/;
const ASCTIME_DATE = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/;

/**
 * Milliseconds a Retry-After header asks for: delay-seconds ("120") or an
 * HTTP-date in any of its three forms ("Wed, 21 Oct 2026 07:28:00 GMT",
 * "Wednesday, 21-Oct-26 07:28:00 GMT", "Wed Oct 21 07:28:00 2026"), counted
 * from `now`. A date in the past means no wait; anything else is ignored
 * (undefined): matching the forms first keeps Date.parse from taking bare
 * numbers or other loose text for a date.
 */
export function parseRetryAfter(header: string, now: number): number | undefined {
  const text = header.trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * SECOND;
  let at: number;
  const rfc850 = RFC850_DATE.exec(text);
  if (IMF_FIXDATE.test(text)) at = Date.parse(text);
  else if (rfc850) at = Date.parse(`${rfc850[1]} ${rfc850[2]} ${fullYear(Number(rfc850[3]), now)} ${rfc850[4]} GMT`);
  // asctime carries no zone, and is GMT: without one Date.parse would read the machine's local time.
  else if (ASCTIME_DATE.test(text)) at = Date.parse(`${text} GMT`);
  else return undefined;
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * The year of an RFC 850 date's two digits, as RFC 9110 (5.6.7) reads them: in the current century, unless
 * that is more than 50 years ahead of `now`, then in the one before. (Date.parse puts 50 to 99 in the 1900s,
 * so a date of 2075 read as 1975, past, asked for no wait at all.)
 */
function fullYear(twoDigits: number, now: number): number {
  const year = new Date(now).getUTCFullYear();
  const inThisCentury = year - (year % 100) + twoDigits;
  return inThisCentury > year + 50 ? inThisCentury - 100 : inThisCentury;
}
