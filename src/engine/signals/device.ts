// Device signals from the browser SDK's Device message, checked against the
// user agent and the IP's country: automation flags, virtual or software
// GPUs, and contradictions a real browser on real hardware does not produce.

import { COUNTRIES, offsetGapMinutes, timeZoneOffsetMinutes } from "../countries.js";
import type { DeviceInput, DeviceSignals, GeoSignals, UserAgentSignals } from "../types.js";

/** Renderer/vendor keyword reported as signals.device.vmIndicator, and its pattern. */
const VM_RENDERER_PATTERNS: readonly (readonly [string, RegExp])[] = [
  ["VMware", /vmware/i],
  ["VirtualBox", /virtualbox/i],
  ["Parallels", /parallels/i],
  ["QEMU", /qemu/i],
  ["virgl", /virgl/i],
  ["VirtIO", /virtio/i],
  ["Hyper-V", /hyper-v/i],
  ["Microsoft Basic Render Driver", /microsoft basic render/i],
  ["Apple Paravirtual", /apple paravirtual/i],
  ["Android Emulator", /android emulator/i],
  ["SwiftShader", /swiftshader/i],
  ["llvmpipe", /llvmpipe/i],
  ["softpipe", /softpipe/i],
  ["Mesa OffScreen", /mesa offscreen/i],
];

/** A time zone this far (or farther) from every offset of the IP's country counts as a mismatch. */
const TIMEZONE_MISMATCH_MINUTES = 120;

type OsFamily = "windows" | "mac" | "ios" | "android" | "linux";

function platformFamily(platform: string): OsFamily | null {
  if (/^win/i.test(platform)) return "windows";
  if (/^mac/i.test(platform)) return "mac";
  if (/^(iphone|ipad|ipod)/i.test(platform)) return "ios";
  if (/^(linux|android)/i.test(platform)) return "linux";
  return null;
}

function userAgentFamily(os: string): OsFamily | null {
  if (os === "Windows") return "windows";
  if (os === "Mac OS" || os === "macOS") return "mac";
  if (os === "iOS") return "ios";
  if (os === "Android") return "android";
  if (/linux|ubuntu|debian|fedora|mint|arch|gentoo|chrom(e|ium) os|centos|red hat|suse/i.test(os)) return "linux";
  return null;
}

/**
 * navigator.platform families each user-agent OS family can report. iPadOS and
 * iOS "request desktop site" send a Mac user agent, and Android reports a
 * "Linux ..." platform, so those pairs are consistent.
 */
const COMPATIBLE_PLATFORMS: Readonly<Record<OsFamily, readonly OsFamily[]>> = {
  windows: ["windows"],
  mac: ["mac", "ios"],
  ios: ["ios", "mac"],
  android: ["linux"],
  linux: ["linux"],
};

/** Larger than any real display in CSS pixels (16K is 15360 wide). */
const MAX_SCREEN_EDGE = 16384;
/** A phone's shorter CSS-pixel edge stays well below this; larger means a desktop pretending. */
const MAX_PHONE_SHORT_EDGE = 1000;

function isImpossibleScreen(screen: DeviceInput["screen"], userAgent: UserAgentSignals): boolean {
  if (screen === undefined) return false;
  // A zero is how proto3 encodes a field left out: each is judged only when it was measured.
  const { width, height, colorDepth, pixelRatio } = screen;
  if (width > MAX_SCREEN_EDGE || height > MAX_SCREEN_EDGE) return true;
  if (colorDepth > 48 || pixelRatio < 0 || pixelRatio > 10) return true;
  return userAgent.deviceType === "mobile" && width > 0 && height > 0 && Math.min(width, height) > MAX_PHONE_SHORT_EDGE;
}

/**
 * Whether the browser SDK's device object says anything. `device: {}` (or one whose fields are all empty)
 * reads as no device at all: nothing in it was read, so it must neither count as device coverage nor stand
 * for a device in the visitor id (fingerprint.ts visitorKey).
 */
export function hasDeviceData(device: DeviceInput | undefined): device is DeviceInput {
  if (device === undefined) return false;
  return (
    device.webdriver !== undefined ||
    Boolean(device.webglRenderer) ||
    Boolean(device.webglVendor) ||
    Boolean(device.timezone) ||
    (device.languages?.length ?? 0) > 0 ||
    Boolean(device.platform) ||
    device.screen !== undefined ||
    device.hardwareConcurrency !== undefined ||
    device.deviceMemory !== undefined ||
    device.touchSupport !== undefined
  );
}

export function computeDeviceSignals(
  device: DeviceInput | undefined,
  userAgent: UserAgentSignals,
  geo: GeoSignals,
  nowMs: number,
): DeviceSignals {
  const input = device ?? {};
  const renderer = `${input.webglRenderer ?? ""} ${input.webglVendor ?? ""}`;
  const vmIndicator = VM_RENDERER_PATTERNS.find(([, pattern]) => pattern.test(renderer))?.[0] ?? "";

  const timezone = input.timezone ?? "";
  const timezoneOffsetMinutes = timeZoneOffsetMinutes(timezone, nowMs);
  const country = COUNTRIES.get(geo.country);
  const timezoneGapMinutes =
    country !== undefined && timezoneOffsetMinutes !== null ? offsetGapMinutes(country, timezoneOffsetMinutes) : 0;

  const fromPlatform = platformFamily(input.platform ?? "");
  const fromUserAgent = userAgentFamily(userAgent.os);
  const platformMismatch =
    fromPlatform !== null && fromUserAgent !== null && !COMPATIBLE_PLATFORMS[fromUserAgent].includes(fromPlatform);

  const touch = input.touchSupport;
  const touchMismatch =
    (userAgent.deviceType === "mobile" || userAgent.deviceType === "tablet") &&
    touch !== undefined &&
    touch.maxTouchPoints === 0 &&
    !touch.touchEvent;

  return {
    present: hasDeviceData(device),
    webdriver: input.webdriver === true,
    vm: vmIndicator !== "",
    vmIndicator,
    timezone,
    timezoneOffsetMinutes,
    timezoneMismatch: timezoneGapMinutes >= TIMEZONE_MISMATCH_MINUTES,
    timezoneGapMinutes,
    platformMismatch,
    touchMismatch,
    impossibleScreen: isImpossibleScreen(input.screen, userAgent),
    // Protobuf cannot tell an empty list from one not sent: only a device object a browser script collected
    // (it has the timezone or platform every browser reports) and no languages is a browser reporting none.
    noLanguages: (timezone !== "" || (input.platform ?? "") !== "") && (input.languages ?? []).length === 0,
  };
}
