// Device fingerprint: a canonical string of the characteristics that stay the
// same across visits of one browser on one device, and a short hash of it.
// Browser versions, window sizes and counters are left out because they
// change on every update or visit. The caller derives visitorId by keying
// the canonical string with a per-account secret; deviceHash is unkeyed and
// only meant for display and grouping.

import { hash } from "node:crypto";
import { computeUserAgentSignals } from "./signals/user-agent.js";
import type { DeviceInput } from "./types.js";

export interface DeviceFingerprint {
  /** JSON with a fixed key order; identical devices give identical strings. */
  canonical: string;
  /** First 12 hex characters of the SHA-256 of `canonical`. */
  deviceHash: string;
}

const DEVICE_HASH_LENGTH = 12;

export function deviceFingerprint(device: DeviceInput | undefined, userAgent: string): DeviceFingerprint {
  const parsed = computeUserAgentSignals(userAgent);
  const input = device ?? {};
  const screen = input.screen;
  // Keys are listed in a fixed order, so JSON.stringify is canonical.
  const stable = {
    browser: parsed.browser,
    os: parsed.os,
    deviceType: parsed.deviceType,
    platform: input.platform ?? "",
    webglRenderer: input.webglRenderer ?? "",
    webglVendor: input.webglVendor ?? "",
    timezone: input.timezone ?? "",
    language: (input.languages ?? [])[0]?.toLowerCase() ?? "",
    // In device pixels: browser zoom changes the CSS-pixel size and the pixel ratio, never their product.
    // Rotating a phone swaps width and height; order them so both give one fingerprint.
    screen: screen === undefined ? null : devicePixels(screen),
    hardwareConcurrency: input.hardwareConcurrency ?? null,
    deviceMemory: input.deviceMemory ?? null,
    maxTouchPoints: input.touchSupport?.maxTouchPoints ?? null,
  };
  const canonical = JSON.stringify(stable);
  const deviceHash = hash("sha256", canonical, "hex").slice(0, DEVICE_HASH_LENGTH);
  return { canonical, deviceHash };
}

/**
 * Browsers report the screen in whole CSS pixels, so CSS size × pixel ratio
 * can miss the true device size by a pixel or two at some zoom levels (1366
 * wide at 150 % reads 911 × 1.5 = 1366.5): edges are snapped to the nearest
 * multiple of this many device pixels. Real screens differ by far more.
 */
const SCREEN_STEP = 8;

/** The screen's longer and shorter edge in device pixels (snapped), and its colour depth. */
function devicePixels(screen: NonNullable<DeviceInput["screen"]>): [number, number, number] {
  const ratio = screen.pixelRatio > 0 ? screen.pixelRatio : 1;
  const snap = (cssPixels: number) => Math.round(Math.round(cssPixels * ratio) / SCREEN_STEP) * SCREEN_STEP;
  return [snap(Math.max(screen.width, screen.height)), snap(Math.min(screen.width, screen.height)), screen.colorDepth];
}
