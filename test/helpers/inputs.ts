/** Realistic request inputs shared by the decision tests. */
import { USER_AGENTS, WINDOWS_DESKTOP_DEVICE } from "./browsers.js";

export { USER_AGENTS };

/** A desktop browser as the SDK reports it, with human interaction. */
export const HUMAN_DESKTOP = {
  userAgent: USER_AGENTS.windowsChrome,
  device: WINDOWS_DESKTOP_DEVICE,
  behavior: { timeOnPageMs: 24_000, formFillMs: 9_000, keystrokes: 41, pointerMoves: 230, pasteEvents: 0, clicks: 4 },
};

/** A headless, automated browser in a VM on a Tor exit with a throwaway address. */
export function botAttack(ip: string) {
  return {
    ip,
    email: "xk4q9v2m7z@mailinator.com",
    userAgent: USER_AGENTS.headlessChrome,
    device: { webdriver: true, webglRenderer: "Google SwiftShader", webglVendor: "Google Inc.", platform: "Linux x86_64" },
    behavior: { timeOnPageMs: 300, formFillMs: 40, keystrokes: 0, pointerMoves: 0, pasteEvents: 2, clicks: 1 },
  };
}

/** A UK residential address per the shipped geolocation database. */
export const UK_IP = "81.2.69.160";
