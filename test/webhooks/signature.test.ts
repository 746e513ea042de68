import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  deliveryHeaders,
  generateSigningSecret,
  signPayload,
  verifyWebhookSignature,
} from "../../src/webhooks/signature.js";

const NOW = Date.UTC(2026, 10, 21, 12, 0, 0);
const NOW_SECONDS = String(NOW / 1000);
const SECRET = "whsec_4eC39HqLyjWDarjtT1zdp7dcAbCdEfGh";
const PAYLOAD = '{"id":"evt_1","type":"decision.deny","data":{"score":91,"note":"Zürich ✓"}}';

function verify(overrides: Partial<{ payload: string | Uint8Array; signature: string; timestamp: string; secret: string }> = {}) {
  return verifyWebhookSignature(
    { payload: PAYLOAD, signature: signPayload(PAYLOAD, SECRET), timestamp: NOW_SECONDS, secret: SECRET, ...overrides },
    NOW,
  );
}

describe("webhook signing secrets", () => {
  it("are whsec_ and 32 base62 characters, different every time", () => {
    const secret = generateSigningSecret();
    expect(secret).toMatch(/^whsec_[0-9A-Za-z]{32}$/);
    expect(generateSigningSecret()).not.toBe(secret);
  });
});

describe("signPayload", () => {
  it("is sha256= and the hex HMAC-SHA256 of the raw payload keyed with the whole secret", () => {
    const expected = createHmac("sha256", SECRET).update(PAYLOAD, "utf8").digest("hex");
    expect(signPayload(PAYLOAD, SECRET)).toBe(`sha256=${expected}`);
    expect(signPayload(Buffer.from(PAYLOAD, "utf8"), SECRET)).toBe(`sha256=${expected}`);
  });

  it("builds the delivery headers", () => {
    expect(deliveryHeaders(PAYLOAD, SECRET, { id: "evt_1", type: "decision.deny" }, NOW / 1000 + 0.9)).toEqual({
      "Content-Type": "application/json",
      "Fraud-Signature": signPayload(PAYLOAD, SECRET),
      "Fraud-Timestamp": NOW_SECONDS,
      "Fraud-Event-Id": "evt_1",
      "Fraud-Event-Type": "decision.deny",
    });
  });
});

describe("verifyWebhookSignature", () => {
  it("accepts what signPayload produced, with or without the sha256= prefix (in any case), in either hex case", () => {
    const signature = signPayload(PAYLOAD, SECRET);
    const hex = signature.slice("sha256=".length);
    expect(verify()).toEqual({ valid: true, reason: "valid" });
    expect(verify({ signature: hex })).toEqual({ valid: true, reason: "valid" });
    expect(verify({ signature: `sha256=${hex.toUpperCase()}` })).toEqual({ valid: true, reason: "valid" });
    expect(verify({ signature: `SHA256=${hex.toUpperCase()}` })).toEqual({ valid: true, reason: "valid" });
    expect(verify({ signature: `Sha256=${hex}` })).toEqual({ valid: true, reason: "valid" });
    expect(verify({ signature: ` ${signature} ` })).toEqual({ valid: true, reason: "valid" });
    expect(verify({ payload: Buffer.from(PAYLOAD, "utf8") })).toEqual({ valid: true, reason: "valid" });
  });

  it("says signature_mismatch for a changed payload, a wrong secret or a wrong digest", () => {
    expect(verify({ payload: PAYLOAD.replace("91", "19") })).toEqual({ valid: false, reason: "signature_mismatch" });
    expect(verify({ payload: `${PAYLOAD}\n` }).reason).toBe("signature_mismatch");
    expect(verify({ signature: signPayload(PAYLOAD, `${SECRET}x`) }).reason).toBe("signature_mismatch");
    expect(verify({ signature: `sha256=${"0".repeat(64)}` }).reason).toBe("signature_mismatch");
    // Keyed with the part after the prefix is not the same signature.
    expect(verify({ signature: signPayload(PAYLOAD, SECRET.slice("whsec_".length)) }).reason).toBe("signature_mismatch");
  });

  it("says malformed_signature for anything but 64 hex digits after an optional sha256=", () => {
    const hex = signPayload(PAYLOAD, SECRET).slice(7);
    for (const signature of ["", "sha256=", hex.slice(1), `${hex}0`, `sha1=${hex}`, `v1,${hex}`, `sha256=${hex.slice(0, 63)}g`]) {
      expect(verify({ signature }).reason, signature).toBe("malformed_signature");
    }
  });

  it("says malformed_timestamp for anything but Unix seconds", () => {
    for (const timestamp of ["", "abc", "-1", "1.5", String(NOW), "2026-11-21T12:00:00Z", "1e9"]) {
      expect(verify({ timestamp }).reason, timestamp).toBe("malformed_timestamp");
    }
  });

  it("says malformed_secret for a secret without the whsec_ prefix or with nothing after it", () => {
    for (const secret of ["", "whsec_", "sk_live_abc", "whsec_has space", `whsec_${"a".repeat(251)}`]) {
      expect(verify({ secret }).reason, secret).toBe("malformed_secret");
    }
  });

  it("allows five minutes of clock difference either way", () => {
    const at = (offsetSeconds: number) => String(NOW / 1000 + offsetSeconds);
    expect(verify({ timestamp: at(-300) }).valid).toBe(true);
    expect(verify({ timestamp: at(300) }).valid).toBe(true);
    expect(verify({ timestamp: at(-301) })).toEqual({ valid: false, reason: "timestamp_outside_tolerance" });
    expect(verify({ timestamp: at(301) })).toEqual({ valid: false, reason: "timestamp_outside_tolerance" });
  });

  it("reports the mismatch before the stale timestamp", () => {
    expect(verify({ timestamp: "1000", payload: "{}" }).reason).toBe("signature_mismatch");
  });
});
