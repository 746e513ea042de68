// Consortium indicators (docs/feedback.md): keyed hashes of a fraud-labelled
// decision's e-mail, device id and IP. The key is shared by the consortium's
// members, so the same entity hashes alike everywhere while the hashes reveal
// nothing to anyone without the key. Raw values never leave the installation.

import { createHmac, timingSafeEqual } from "node:crypto";
import { canonicalJson } from "../canonical-json.js";
import { canonicalMailbox, publicIpText } from "../engine/index.js";
import type { DecisionEntities } from "../store/history.js";

const INDICATOR_TYPES = ["email", "device", "ip"] as const;
export type IndicatorType = (typeof INDICATOR_TYPES)[number];

export interface Indicator {
  type: IndicatorType;
  /** Lower-case hex HMAC-SHA256 of `<type>:<normalised value>` under the consortium key. */
  hash: string;
}

/** A consortium key must carry at least this many characters (about 190 bits as base62). */
export const MIN_CONSORTIUM_KEY_LENGTH = 32;
/** How far a batch's signing time may be from the receiver's clock, either way. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;
export const HASH_FORMAT = /^[0-9a-f]{64}$/;

export function hashIndicator(key: string, type: IndicatorType, value: string): string {
  return createHmac("sha256", Buffer.from(key, "utf8")).update(`${type}:${value}`).digest("hex");
}

/** The indicators of a decision's entities; entities it did not carry are left out. */
export function indicatorsOf(entities: Pick<DecisionEntities, "email" | "deviceId" | "ip">, key: string): Indicator[] {
  const values: Array<[IndicatorType, string]> = [
    // The mailbox: every +tag and Gmail dot spelling of one inbox hashes alike.
    ["email", canonicalMailbox(entities.email)],
    ["device", entities.deviceId.trim()],
    // Public addresses only: a backend's own private address would match every member's.
    ["ip", publicIpText(entities.ip)],
  ];
  return values.filter(([, value]) => value !== "").map(([type, value]) => ({ type, hash: hashIndicator(key, type, value) }));
}

/**
 * Names the consortium key indicators were hashed with, without revealing it (an HMAC of a fixed label under
 * the key): a queued batch carries it, so that one hashed with a key since replaced is not sent under the new
 * one, whose hub could match none of its hashes.
 */
export function keyFingerprint(key: string): string {
  return createHmac("sha256", Buffer.from(key, "utf8")).update("consortium key fingerprint").digest("hex").slice(0, 16);
}

/** What a batch signature covers. */
export interface SignedBatch {
  batchId: string;
  /** Unix seconds. */
  signedAt: number;
  indicators: readonly Indicator[];
}

/** Hex HMAC-SHA256 under the consortium key of the batch's canonical JSON. */
export function signBatch(key: string, batch: SignedBatch): string {
  const content = canonicalJson({
    batchId: batch.batchId,
    signedAt: batch.signedAt,
    indicators: batch.indicators.map((indicator) => ({ type: indicator.type, hash: indicator.hash })),
  });
  return createHmac("sha256", Buffer.from(key, "utf8")).update(content).digest("hex");
}

export type BatchVerification = "valid" | "signature_mismatch" | "outside_tolerance";

/** Checks the signature first (a forged batch reads as forged even when old), then freshness. */
export function verifyBatch(key: string, batch: SignedBatch, signature: string, nowMs: number): BatchVerification {
  const expected = Buffer.from(signBatch(key, batch), "hex");
  const received = Buffer.from(HASH_FORMAT.test(signature) ? signature : "", "hex");
  if (received.length !== expected.length || !timingSafeEqual(received, expected)) return "signature_mismatch";
  if (Math.abs(nowMs / 1000 - batch.signedAt) > SIGNATURE_TOLERANCE_SECONDS) return "outside_tolerance";
  return "valid";
}
