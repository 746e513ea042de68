// Real user-agent strings and device profiles as the browser SDK reports them,
// shared by the tests and the benchmarks so every suite speaks about the same browsers.

export const USER_AGENTS = {
  windowsChrome:
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
  iphoneSafari:
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
  androidChrome:
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36",
  macSafari:
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Safari/605.1.15",
  linuxFirefox: "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
  headlessChrome:
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.6099.109 Safari/537.36",
  phantomJs: "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
  googlebot: "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
  curl: "curl/8.5.0",
  pythonRequests: "python-requests/2.31.0",
  goHttpClient: "Go-http-client/1.1",
} as const;

/** A Windows desktop with a discrete GPU, in London. */
export const WINDOWS_DESKTOP_DEVICE = {
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
};

/** An iPhone 15, in London. */
export const IPHONE_DEVICE = {
  webglRenderer: "Apple GPU",
  webglVendor: "Apple Inc.",
  timezone: "Europe/London",
  languages: ["en-GB"],
  platform: "iPhone",
  screen: { width: 393, height: 852, colorDepth: 24, pixelRatio: 3 },
  hardwareConcurrency: 6,
  touchSupport: { maxTouchPoints: 5, touchEvent: true },
};
