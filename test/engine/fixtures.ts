// Realistic requests shared by the engine tests.

import type { EngineInput, HistorySnapshot } from "../../src/engine/index.js";
import { EMPTY_HISTORY_SNAPSHOT } from "../../src/engine/index.js";
import { IPHONE_DEVICE, USER_AGENTS, WINDOWS_DESKTOP_DEVICE } from "../helpers/browsers.js";

export { USER_AGENTS };

/** A person on desktop Chrome in London logging in normally. */
export function cleanDesktopLogin(): EngineInput {
  return {
    userId: "user_4821",
    action: "login",
    email: "jane.doe@gmail.com",
    ip: "81.2.69.160",
    deviceId: "vis_7f3a9c",
    userAgent: USER_AGENTS.windowsChrome,
    device: WINDOWS_DESKTOP_DEVICE,
    behavior: { timeOnPageMs: 14_000, formFillMs: 6_200, keystrokes: 24, pointerMoves: 130, pasteEvents: 0, clicks: 3 },
  };
}

/** The same person on an iPhone. */
export function cleanIphoneLogin(): EngineInput {
  return {
    ...cleanDesktopLogin(),
    userAgent: USER_AGENTS.iphoneSafari,
    device: IPHONE_DEVICE,
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
    previousDecision: { atMs: Date.UTC(2026, 10, 21, 9, 0), country: "GB" },
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
