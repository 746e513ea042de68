// Realistic requests shared by the engine tests.

import type { EngineInput, HistorySnapshot } from "../../src/engine/index.js";
import { EMPTY_HISTORY_SNAPSHOT } from "../../src/engine/index.js";

export const USER_AGENTS = {
  windowsChrome:
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
  iphoneSafari:
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
  headlessChrome:
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.6099.109 Safari/537.36",
  phantomJs: "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
  googlebot: "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
  curl: "curl/8.5.0",
  pythonRequests: "python-requests/2.31.0",
  goHttpClient: "Go-http-client/1.1",
} as const;

/** A person on desktop Chrome in London logging in normally. */
export function cleanDesktopLogin(): EngineInput {
  return {
    userId: "user_4821",
    action: "login",
    email: "jane.doe@gmail.com",
    ip: "81.2.69.160",
    deviceId: "vis_7f3a9c",
    userAgent: USER_AGENTS.windowsChrome,
    device: {
      webdriver: false,
      webglRenderer: "ANGLE (NVIDIA, NVIDIA GeForce RTX 3060 Direct3D11 vs_5_0 ps_5_0, D3D11)",
      webglVendor: "Google Inc. (NVIDIA)",
      timezone: "Europe/London",
      languages: ["en-GB", "en"],
      platform: "Win32",
      screen: { width: 1920, height: 1080, colorDepth: 24, pixelRatio: 1 },
      hardwareConcurrency: 8,
      deviceMemory: 8,
      touchSupport: { maxTouchPoints: 0, touchEvent: false },
    },
    behavior: { timeOnPageMs: 14_000, formFillMs: 6_200, keystrokes: 24, pointerMoves: 130, pasteEvents: 0, clicks: 3 },
  };
}

/** The same person on an iPhone. */
export function cleanIphoneLogin(): EngineInput {
  return {
    ...cleanDesktopLogin(),
    userAgent: USER_AGENTS.iphoneSafari,
    device: {
      webglRenderer: "Apple GPU",
      webglVendor: "Apple Inc.",
      timezone: "Europe/London",
      languages: ["en-GB"],
      platform: "iPhone",
      screen: { width: 393, height: 852, colorDepth: 24, pixelRatio: 3 },
      hardwareConcurrency: 6,
      touchSupport: { maxTouchPoints: 5, touchEvent: true },
    },
    behavior: { timeOnPageMs: 9_000, formFillMs: 4_000, keystrokes: 20, pointerMoves: 0, pasteEvents: 0, clicks: 4 },
  };
}

/** A user the store knows: seen on this device and from GB an hour ago. */
export function knownUserSnapshot(): HistorySnapshot {
  return {
    ...EMPTY_HISTORY_SNAPSHOT,
    counts: {
      user: { lastMinute: 0, lastHour: 1, lastDay: 3 },
      ip: { lastMinute: 0, lastHour: 1, lastDay: 4 },
      device: { lastMinute: 0, lastHour: 1, lastDay: 3 },
      email: { lastMinute: 0, lastHour: 1, lastDay: 3 },
    },
    distinctUsersPerDevice24h: 1,
    distinctUsersPerIp24h: 2,
    previousDecision: { atMs: Date.UTC(2026, 10, 21, 9, 0), country: "GB", ip: "81.2.69.160" },
    knownDeviceIds: ["vis_7f3a9c"],
    knownCountries: ["GB"],
    amountHistory: { GBP: { count: 12, max: 180, mean: 64 } },
    graph: { linkedToFraud: false, hops: null, fraudNeighbours: 0 },
    consortium: { matches: 0, indicatorTypes: [] },
  };
}

/** 2026-11-21 10:00 UTC: the fixed clock of the tests. */
export const NOW_MS = Date.UTC(2026, 10, 21, 10, 0);

export const TOR_BULK_EXIT_LIST = `# This is a list of all Tor exit nodes from the past hour that can contact 1.1.1.1 on port 443 #
# Last updated: 2026-11-21 09:45:00 UTC
185.220.101.1
185.220.101.45
171.25.193.77
2a0b:f4c2:2::1
`;

export const TOR_EXIT_ADDRESSES = `ExitNode 0011BD2485AD45D984EC4159C88FC066E5E3300E
Published 2026-11-01 03:12:47
LastStatus 2026-11-01 10:00:00
ExitAddress 185.220.101.1 2026-11-01 10:00:00
ExitNode 00FCFBA1DE6AB6E0C0AB9A82D14E1B2BAB0C0A9E
Published 2026-11-01 02:01:14
LastStatus 2026-11-01 09:00:00
ExitAddress 204.8.96.88 2026-11-01 09:16:33
`;
