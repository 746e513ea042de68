// Device fingerprint: a canonical string of the characteristics that stay the
// same across visits of one browser on one device, and a short hash of it.
// Browser versions, window sizes and counters are left out because they
// change on every update or visit. The caller derives visitorId by keying
// the canonical string with a per-account secret; deviceHash is unkeyed and
// only meant for display and grouping.

import { hash } from "node:crypto";
import { clientNetwork } from "./ip.js";
import { hasDeviceData } from "./signals/device.js";
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
 * What a visitor id is derived from: the caller's own `deviceId` when it sent
 * one, else the fingerprint. Without a `device` object (or with an empty one) the fingerprint holds
 * only the user agent's browser, OS and device type, the same for everyone on
 * one browser version's family, so the client's network is added: its IPv4
 * address, or the /64 of its IPv6 address (a household's or a phone's prefix,
 * which outlives the address's daily rotation).
 */
export function visitorKey(deviceId: string, device: DeviceInput | undefined, fingerprint: DeviceFingerprint, ip: string): string {
  if (deviceId !== "") return `device:${deviceId}`;
  if (describesHardware(device)) return `fingerprint:${fingerprint.canonical}`;
  return `fingerprint:${fingerprint.canonical}|network:${clientNetwork(ip)}`;
}

/**
 * Whether a device object tells the hardware apart (its GPU, screen, cores or memory): one that holds only
 * a time zone, languages or `webdriver: false` adds to the user agent what millions of visitors share, so the
 * client's network must still be added.
 */
function describesHardware(device: DeviceInput | undefined): boolean {
  if (!hasDeviceData(device)) return false;
  const { screen } = device;
  return Boolean(device.webglRenderer) || (screen !== undefined && screen.width > 0 && screen.height > 0) || device.hardwareConcurrency !== undefined || device.deviceMemory !== undefined;
}

/**
 * Browsers report the screen in whole CSS pixels (rounded or cut), so CSS
 * size × pixel ratio can miss the true device size by a few pixels at some
 * zoom levels (1366 wide at 150 % reads 911 × 1.5 = 1366.5). An edge within
 * SCREEN_TOLERANCE of a common screen edge is taken as that edge; any other
 * is rounded to a multiple of SCREEN_STEP. Real screens differ by far more.
 * No two common edges here are within 2 × SCREEN_TOLERANCE of each other.
 * The scaled defaults of Apple's laptops (1470 × 956 and 1710 × 1107 at 2×:
 * 2940 and 3420 wide) are among them: each falls halfway between two
 * multiples of SCREEN_STEP, where a pixel of rounding would flip it.
 */
const COMMON_SCREEN_EDGES = [
  640, 720, 750, 768, 800, 828, 864, 900, 960, 1024, 1050, 1080, 1125, 1136, 1152, 1170, 1179, 1200, 1242, 1280, 1290, 1334,
  1366, 1440, 1536, 1600, 1620, 1664, 1680, 1800, 1920, 1964, 2048, 2160, 2208, 2224, 2256, 2340, 2388, 2400, 2436, 2532,
  2560, 2688, 2732, 2778, 2796, 2880, 2940, 3024, 3200, 3420, 3456, 3840, 4096, 5120,
];
const SCREEN_TOLERANCE = 4;
const SCREEN_STEP = 8;

function snapEdge(devicePixels: number): number {
  const common = COMMON_SCREEN_EDGES.find((edge) => Math.abs(edge - devicePixels) <= SCREEN_TOLERANCE);
  return common ?? Math.round(devicePixels / SCREEN_STEP) * SCREEN_STEP;
}

/** The screen's longer and shorter edge in device pixels (snapped), and its colour depth. */
function devicePixels(screen: NonNullable<DeviceInput["screen"]>): [number, number, number] {
  const ratio = screen.pixelRatio > 0 ? screen.pixelRatio : 1;
  const edge = (cssPixels: number) => snapEdge(Math.round(cssPixels * ratio));
  return [edge(Math.max(screen.width, screen.height)), edge(Math.min(screen.width, screen.height)), screen.colorDepth];
}
