import { createHmac, timingSafeEqual } from "node:crypto";
import { randomBase62 } from "../ids.js";

/** Headers of every HTTP delivery (docs/webhooks.md). */
export const SIGNATURE_HEADER = "Fraud-Signature";
export const TIMESTAMP_HEADER = "Fraud-Timestamp";
export const EVENT_ID_HEADER = "Fraud-Event-Id";
export const EVENT_TYPE_HEADER = "Fraud-Event-Type";

/** How far a delivery's timestamp may be from the verifier's clock, either way. */
export const TIMESTAMP_TOLERANCE_SECONDS = 300;

const SECRET_PREFIX = "whsec_";
/** Generated secrets are 32 base62 characters (~190 bits) after the prefix. */
const SECRET_RANDOM_LENGTH = 32;
/**
 * Any printable, space-free value after the prefix is accepted, so a secret
 * migrated from another system still verifies; 250 keeps the whole secret
 * inside the verify operation's 256-character limit.
 */
const SECRET_FORMAT = /^whsec_[\x21-\x7e]{1,250}$/;
// The prefix is a label, matched in any case, like the hex digits after it.
const SIGNATURE_FORMAT = /^(?:sha256=)?([0-9a-f]{64})$/i;
/**
 * Unix seconds as plain digits. 11 digits reach past the year 5000; a
 * millisecond value (13 digits) is refused rather than misread.
 */
const TIMESTAMP_FORMAT = /^[0-9]{1,11}$/;

export function generateSigningSecret(): string {
  return `${SECRET_PREFIX}${randomBase62(SECRET_RANDOM_LENGTH)}`;
}

/**
 * `sha256=` followed by the hex HMAC-SHA256 of the raw payload. The key is the
 * whole secret string, prefix included, as UTF-8: receivers paste the secret
 * into their HMAC call as shown, with nothing to strip or decode.
 */
export function signPayload(payload: string | Uint8Array, secret: string): string {
  return `sha256=${hmacHex(payload, secret)}`;
}

/** Headers for one delivery attempt; `timestamp` is Unix seconds at sending time. */
export function deliveryHeaders(
  payload: string | Uint8Array,
  secret: string,
  event: { id: string; type: string },
  timestamp: number,
): Record<string, string> {
  return {
    "Content-Type": "application/json",
    [SIGNATURE_HEADER]: signPayload(payload, secret),
    [TIMESTAMP_HEADER]: String(Math.floor(timestamp)),
    [EVENT_ID_HEADER]: event.id,
    [EVENT_TYPE_HEADER]: event.type,
  };
}

export type VerificationReason =
  | "valid"
  | "malformed_secret"
  | "malformed_signature"
  | "malformed_timestamp"
  | "signature_mismatch"
  | "timestamp_outside_tolerance";

export interface VerificationInput {
  /** The raw body exactly as received (a string is taken as its UTF-8 bytes). */
  payload: string | Uint8Array;
  /** The Fraud-Signature header: `sha256=<hex>` or the bare hex digest. */
  signature: string;
  /** The Fraud-Timestamp header: Unix seconds. */
  timestamp: string;
  secret: string;
}

/**
 * Checks a received webhook. The formats are checked first, then the HMAC, then
 * the timestamp, so a wrong secret or a changed body reads "signature_mismatch"
 * even when the delivery is also old: the more fundamental fault wins.
 *
 * The HMAC covers the payload only, as the specification says; the timestamp
 * is checked for freshness but not authenticated (docs/webhooks.md explains
 * how receivers stop replays with the signed event id).
 */
export function verifyWebhookSignature(
  input: VerificationInput,
  nowMs: number,
  toleranceSeconds = TIMESTAMP_TOLERANCE_SECONDS,
): { valid: boolean; reason: VerificationReason } {
  if (!SECRET_FORMAT.test(input.secret)) return { valid: false, reason: "malformed_secret" };
  const match = SIGNATURE_FORMAT.exec(input.signature.trim());
  if (match === null) return { valid: false, reason: "malformed_signature" };
  const timestampText = input.timestamp.trim();
  if (!TIMESTAMP_FORMAT.test(timestampText)) return { valid: false, reason: "malformed_timestamp" };

  // Both sides are 32 bytes, so timingSafeEqual never throws and its running
  // time says nothing about how many leading bytes matched.
  const received = Buffer.from(match[1] as string, "hex");
  const expected = Buffer.from(hmacHex(input.payload, input.secret), "hex");
  if (!timingSafeEqual(received, expected)) return { valid: false, reason: "signature_mismatch" };

  const skewSeconds = Math.abs(nowMs / 1000 - Number(timestampText));
  if (skewSeconds > toleranceSeconds) return { valid: false, reason: "timestamp_outside_tolerance" };
  return { valid: true, reason: "valid" };
}

function hmacHex(payload: string | Uint8Array, secret: string): string {
  return createHmac("sha256", Buffer.from(secret, "utf8")).update(payload).digest("hex");
}
