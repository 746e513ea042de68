/** Realistic request inputs shared by the decision tests. */
export const USER_AGENTS = {
  windowsChrome: "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
  iphoneSafari: "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
  headlessChrome: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.6099.109 Safari/537.36",
  googlebot: "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
  curl: "curl/8.5.0",
  pythonRequests: "python-requests/2.31.0",
};

/** A desktop browser as the SDK reports it, with human interaction. */
export const HUMAN_DESKTOP = {
  userAgent: USER_AGENTS.windowsChrome,
  device: {
    webdriver: false,
    webglRenderer: "ANGLE (Intel, Intel(R) UHD Graphics 620 Direct3D11 vs_5_0 ps_5_0, D3D11)",
    webglVendor: "Google Inc. (Intel)",
    timezone: "Europe/London",
    languages: ["en-GB", "en"],
    platform: "Win32",
    screen: { width: 1920, height: 1080, colorDepth: 24, pixelRatio: 1 },
    hardwareConcurrency: 8,
    deviceMemory: 8,
    touchSupport: { maxTouchPoints: 0, touchEvent: false },
  },
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
