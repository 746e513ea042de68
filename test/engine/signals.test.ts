import { beforeAll, describe, expect, it } from "vitest";
import {
  ReferenceData,
  canonicalEmail,
  canonicalMailbox,
  computeFastSignals,
  computeStoreSignals,
  deviceFingerprint,
  EMPTY_HISTORY_SNAPSHOT,
  mergeSignals,
  userLocationCountry,
} from "../../src/engine/index.js";
import type { EngineInput, FastSignals } from "../../src/engine/index.js";
import { canonicalJson } from "../../src/canonical-json.js";
import { timeZoneCacheSizes } from "../../src/engine/countries.js";
import { cleanDesktopLogin, cleanIphoneLogin, knownUserSnapshot, NOW_MS, USER_AGENTS } from "./fixtures.js";

let data: ReferenceData;
beforeAll(() => {
  data = ReferenceData.load();
});

function fast(overrides: Partial<EngineInput> = {}): FastSignals {
  return computeFastSignals({ ...cleanDesktopLogin(), ...overrides }, data, NOW_MS);
}

describe("network and geo", () => {
  it("reports version, range and country", () => {
    expect(fast({ ip: "8.8.8.8" }).network).toMatchObject({ version: 4, rangeType: "public", private: false });
    expect(fast({ ip: "8.8.8.8" }).geo).toEqual({ country: "US", countryKnown: true });
    expect(fast({ ip: "2001:4860:4860::8888" }).network.version).toBe(6);
  });

  it("judges a NAT64 address as the IPv4 client it carries, and shows it as sent", () => {
    expect(fast({ ip: "64:ff9b::8.8.8.8" }).network).toMatchObject({ ip: "64:ff9b::808:808", version: 6, rangeType: "public" });
    expect(fast({ ip: "64:ff9b::8.8.8.8" }).geo).toEqual({ country: "US", countryKnown: true });
    expect(fast({ ip: "64:ff9b::10.0.0.1" }).network).toMatchObject({ rangeType: "private", private: true });
  });

  it.each([
    ["10.0.0.1", "private", true, false],
    ["100.64.0.1", "cgnat", true, false],
    ["::1", "loopback", true, false],
    ["fe80::1", "linkLocal", true, false],
    ["2001:db8::1", "documentation", false, true],
  ])("%s is %s with no country", (ip, rangeType, isPrivate, isReserved) => {
    const signals = fast({ ip });
    expect(signals.network).toMatchObject({ rangeType, private: isPrivate, reserved: isReserved });
    // The database places 2001:db8::/32 inside a registered block; special ranges must not inherit it.
    expect(signals.geo.country).toBe("");
  });

  it("distinguishes a missing address from an invalid one", () => {
    expect(fast({ ip: "" }).network).toMatchObject({ present: false, valid: false, version: 0, rangeType: "none" });
    expect(fast({ ip: "999.1.1.1" }).network).toMatchObject({ present: true, valid: false });
  });
});

describe("user agent", () => {
  it("leaves real browsers alone", () => {
    expect(fast().userAgent).toMatchObject({
      browser: "Chrome",
      browserMajor: 124,
      os: "Windows",
      deviceType: "desktop",
      bot: false,
      automation: false,
    });
    expect(fast({ userAgent: USER_AGENTS.iphoneSafari }).userAgent).toMatchObject({
      os: "iOS",
      deviceType: "mobile",
      bot: false,
    });
  });

  it("detects headless browsers", () => {
    expect(fast({ userAgent: USER_AGENTS.headlessChrome }).userAgent).toMatchObject({
      headless: true,
      automation: true,
      crawler: false,
    });
    expect(fast({ userAgent: USER_AGENTS.phantomJs }).userAgent.headless).toBe(true);
  });

  it.each([
    [USER_AGENTS.curl, "curl"],
    [USER_AGENTS.pythonRequests, "python-requests"],
    [USER_AGENTS.goHttpClient, "go-http-client"],
    ["node", "node"],
  ])("names the automation tool in %s", (userAgent, tool) => {
    expect(fast({ userAgent }).userAgent).toMatchObject({ automationTool: tool, automation: true, crawler: false });
  });

  it("classifies Googlebot as a crawler, not automation", () => {
    expect(fast({ userAgent: USER_AGENTS.googlebot }).userAgent).toMatchObject({
      bot: true,
      crawler: true,
      automation: false,
    });
  });

  // HTTP client libraries as they introduce themselves: isbot catches most, and one no pattern named used to
  // count as a declared crawler; PowerShell dresses as a Windows browser that isbot does not catch.
  it.each([
    ["Java-http-client/21.0.1", "java"],
    ["PycURL/7.45.2 libcurl/8.5.0 OpenSSL/3.0.13", "pycurl"],
    ["GuzzleHttp/7", "guzzle"],
    ["RestSharp/110.2.0.0", "restsharp"],
    ["Deno/1.40.0", "deno"],
    ["Bun/1.0.25", "bun"],
    ["PHP/8.2", "php"],
    ["urllib3/2.0.7", "urllib3"],
    ["AHC/2.1", "async-http-client"],
    ["ReactorNetty/1.1.0", "reactor-netty"],
    ["Vert.x-WebClient/4.5.1", "vertx-webclient"],
    ["Symfony HttpClient/Curl", "symfony-httpclient"],
    ["got (https://github.com/sindresorhus/got)", "got"],
    ["Typhoeus - https://github.com/typhoeus/typhoeus", "typhoeus"],
    ["Mozilla/5.0 (Windows NT 10.0; Microsoft Windows 10.0.19045; en-US) WindowsPowerShell/5.1.19041.3803", "powershell"],
    ["Mozilla/5.0 (Windows NT 10.0; Microsoft Windows 10.0.22631; en-US) PowerShell/7.4.1", "powershell"],
  ])("names the HTTP library in %s an automation tool, not a crawler", (userAgent, tool) => {
    expect(fast({ userAgent }).userAgent).toMatchObject({ automationTool: tool, automation: true, crawler: false });
  });

  it.each([USER_AGENTS.googlebot, "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"])(
    "keeps the declared crawler %s a crawler",
    (userAgent) => {
      expect(fast({ userAgent }).userAgent).toMatchObject({ bot: true, crawler: true, automationTool: "", automation: false });
    },
  );

  it.each(Object.entries(USER_AGENTS).filter(([name]) => ["windowsChrome", "iphoneSafari", "androidChrome", "macSafari", "linuxFirefox"].includes(name)))(
    "finds no tool in the real browser %s",
    (_name, userAgent) => {
      expect(fast({ userAgent }).userAgent).toMatchObject({ bot: false, crawler: false, headless: false, automationTool: "", automation: false });
    },
  );

  it("takes an in-app browser that names its shop's domain for a browser, and a fetcher with a contact domain for a crawler", () => {
    const amazonApp = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 AmazonApp/Amazon.com/23.7.2/iOS/17.4/iPhone";
    expect(fast({ userAgent: amazonApp }).userAgent).toMatchObject({ bot: false, crawler: false, deviceType: "mobile" });
    expect(fast({ userAgent: "SiteMonitor/1.0 (status.example.com)" }).userAgent).toMatchObject({ bot: true, crawler: true });
  });

  it("reports a missing user agent", () => {
    expect(fast({ userAgent: "" }).userAgent).toMatchObject({ present: false, deviceType: "unknown" });
  });
});

describe("device", () => {
  const device = cleanDesktopLogin().device;

  it("finds nothing wrong with a consistent desktop or phone", () => {
    for (const input of [cleanDesktopLogin(), cleanIphoneLogin()]) {
      expect(computeFastSignals(input, data, NOW_MS).device).toMatchObject({
        webdriver: false,
        vm: false,
        timezoneMismatch: false,
        platformMismatch: false,
        touchMismatch: false,
        impossibleScreen: false,
        noLanguages: false,
      });
    }
  });

  it.each([
    ["ANGLE (VMware, Inc., VMware SVGA 3D (Microsoft Corporation - WDDM), D3D11)", "VMware"],
    ["ANGLE (Oracle Corporation, VirtualBox Graphics Adapter (WDDM), D3D11)", "VirtualBox"],
    ["ANGLE (Google, Vulkan 1.3.0 (SwiftShader Device (Subzero) (0x0000C0DE)), SwiftShader driver)", "SwiftShader"],
    ["llvmpipe (LLVM 15.0.7, 256 bits)", "llvmpipe"],
    ["ANGLE (Microsoft, Microsoft Basic Render Driver Direct3D11 vs_5_0 ps_5_0, D3D11)", "Microsoft Basic Render Driver"],
    ["Parallels Display Adapter (WDDM)", "Parallels"],
    ["virgl (Mesa 23.2.1)", "virgl"],
  ])("flags the renderer %s as a VM", (webglRenderer, indicator) => {
    expect(fast({ device: { ...device, webglRenderer } }).device).toMatchObject({ vm: true, vmIndicator: indicator });
  });

  it("reports navigator.webdriver", () => {
    expect(fast({ device: { ...device, webdriver: true } }).device.webdriver).toBe(true);
  });

  it("compares the time zone with the IP's country", () => {
    const tokyo = fast({ device: { ...device, timezone: "Asia/Tokyo" } }).device;
    expect(tokyo.timezoneOffsetMinutes).toBe(540);
    expect(tokyo.timezoneMismatch).toBe(true);
    expect(tokyo.timezoneGapMinutes).toBe(480); // GB uses +0:00 and +1:00
    // Paris is one hour from London time: a traveller, not a contradiction.
    expect(fast({ device: { ...device, timezone: "Europe/Paris" } }).device.timezoneMismatch).toBe(false);
    // New York vs a US IP: inside the country's range.
    expect(fast({ ip: "8.8.8.8", device: { ...device, timezone: "America/New_York" } }).device.timezoneGapMinutes).toBe(0);
    expect(fast({ device: { ...device, timezone: "Not/AZone" } }).device.timezoneOffsetMinutes).toBeNull();
  });

  it("keeps one formatter per zone however a client spells it", () => {
    const before = timeZoneCacheSizes();
    // Intl takes any case of a zone name, and aliases: 600 spellings of one zone.
    const spellings = Array.from({ length: 600 }, (_, i) =>
      [..."America/Argentina/ComodRivadavia"].map((c, j) => ((i >> j % 10) & 1 ? c.toUpperCase() : c.toLowerCase())).join("")
    );
    expect(new Set(spellings).size).toBe(600);
    for (const timezone of spellings) {
      expect(fast({ ip: "8.8.8.8", device: { ...device, timezone } }).device.timezoneOffsetMinutes).toBe(-180);
    }
    const after = timeZoneCacheSizes();
    expect(after.formatters - before.formatters).toBeLessThanOrEqual(1);
    expect(after.offsets - before.offsets).toBeLessThanOrEqual(1);
    // Spellings are remembered up to a bound, then forgotten all at once.
    for (let i = 0; i < 2500; i++) fast({ device: { ...device, timezone: `Not/AZone${i}` } });
    expect(timeZoneCacheSizes().spellings).toBeLessThanOrEqual(2000);
    expect(timeZoneCacheSizes().formatters).toBe(after.formatters);
  });

  it("catches a platform that contradicts the user agent", () => {
    expect(fast({ device: { ...device, platform: "Linux x86_64" } }).device.platformMismatch).toBe(true);
    expect(fast({ device: { ...device, platform: "MacIntel" } }).device.platformMismatch).toBe(true);
    const android = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";
    expect(fast({ userAgent: android, device: { ...device, platform: "Linux armv8l" } }).device.platformMismatch).toBe(false);
  });

  it("catches a phone without touch and impossible screens", () => {
    const iphone = cleanIphoneLogin();
    const noTouch = { ...iphone, device: { ...iphone.device, touchSupport: { maxTouchPoints: 0, touchEvent: false } } };
    expect(computeFastSignals(noTouch, data, NOW_MS).device.touchMismatch).toBe(true);
    const desktopScreen = { ...iphone, device: { ...iphone.device, screen: { width: 1920, height: 1080, colorDepth: 24, pixelRatio: 1 } } };
    expect(computeFastSignals(desktopScreen, data, NOW_MS).device.impossibleScreen).toBe(true);
    expect(fast({ device: { ...device, screen: { width: 20000, height: 1080, colorDepth: 24, pixelRatio: 1 } } }).device.impossibleScreen).toBe(true);
    expect(fast({ device: { ...device, screen: { width: 0, height: 0, colorDepth: 0, pixelRatio: 0 } } }).device.impossibleScreen).toBe(false);
    // A zero is a field left out (proto3): a partly filled screen is judged by what it has.
    expect(fast({ device: { ...device, screen: { width: 1920, height: 0, colorDepth: 0, pixelRatio: 0 } } }).device.impossibleScreen).toBe(false);
    expect(fast({ device: { ...device, screen: { width: 0, height: 1080, colorDepth: 24, pixelRatio: 1 } } }).device.impossibleScreen).toBe(false);
    expect(fast({ device: { ...device, screen: { width: 0, height: 20000, colorDepth: 0, pixelRatio: 0 } } }).device.impossibleScreen).toBe(true);
  });

  it("reports empty navigator.languages only when the SDK sent a device", () => {
    expect(fast({ device: { ...device, languages: [] } }).device.noLanguages).toBe(true);
    expect(fast({ device: undefined }).device).toMatchObject({ present: false, noLanguages: false });
    // A device object with nothing a browser always reports says nothing about languages.
    expect(fast({ device: { webdriver: false } }).device.noLanguages).toBe(false);
    expect(fast({ device: { platform: "Win32" } }).device.noLanguages).toBe(true);
  });
});

describe("behavior", () => {
  it("accepts human pacing", () => {
    expect(fast().behavior).toMatchObject({ present: true, tooFast: false, noInteraction: false, pasteOnly: false });
  });

  it("flags inhumanly fast and empty interaction", () => {
    expect(fast({ behavior: { timeOnPageMs: 400, formFillMs: 120, keystrokes: 22, pointerMoves: 0, clicks: 1, pasteEvents: 0 } }).behavior.tooFast).toBe(true);
    // 60 keys in 2 s: 30 keys per second.
    expect(fast({ behavior: { timeOnPageMs: 9000, formFillMs: 2000, keystrokes: 60, pointerMoves: 40, clicks: 2, pasteEvents: 0 } }).behavior.tooFast).toBe(true);
    expect(fast({ behavior: { timeOnPageMs: 9000, keystrokes: 0, pointerMoves: 0, clicks: 0, pasteEvents: 0 } }).behavior.noInteraction).toBe(true);
    expect(fast({ behavior: { timeOnPageMs: 9000, keystrokes: 0, pointerMoves: 30, clicks: 1, pasteEvents: 2 } }).behavior.pasteOnly).toBe(true);
  });

  it("has neutral defaults without behaviour data", () => {
    expect(fast({ behavior: undefined }).behavior).toEqual({
      present: false,
      timeOnPageMs: null,
      formFillMs: null,
      keystrokes: 0,
      pointerMoves: 0,
      pasteEvents: 0,
      clicks: 0,
      tooFast: false,
      noInteraction: false,
      pasteOnly: false,
    });
  });
});

describe("email", () => {
  it.each(["mailinator.com", "guerrillamail.com", "10minutemail.com"])("flags %s as disposable", (domain) => {
    expect(fast({ email: `someone@${domain}` }).email).toMatchObject({ valid: true, disposable: true, domain });
  });

  it("reads an internationalised domain in either spelling, and compatibility forms as IDNA maps them", () => {
    // index.json writes this one in punycode.
    expect(fast({ email: "jane@5801000.xn--p1ai" }).email).toMatchObject({ valid: true, disposable: true, domain: "5801000.рф" });
    expect(fast({ email: "jane@5801000.РФ" }).email).toMatchObject({ valid: true, disposable: true, domain: "5801000.рф" });
    // Fullwidth letters are mailinator.com to every mail system.
    expect(fast({ email: "jane@ｍａｉｌｉｎａｔｏｒ.com" }).email).toMatchObject({ valid: true, disposable: true, domain: "mailinator.com" });
    expect(fast({ email: "jane@xn--mnchen-3ya.de" }).email).toMatchObject({ valid: true, disposable: false, domain: "münchen.de" });
    expect(canonicalEmail(" Jane@XN--MNCHEN-3YA.de ")).toBe(canonicalEmail("jane@MÜNCHEN.de"));
    expect(canonicalEmail("jane@münchen.de")).toBe("jane@münchen.de");
    // Fully qualified, the same domain.
    expect(canonicalEmail("Jane@Example.com.")).toBe("jane@example.com");
    // IDNA as the URL parser does it would percent-decode: mail knows no such spelling.
    expect(canonicalEmail("jane@ex%41mple.com")).toBe("jane@ex%41mple.com");
    expect(canonicalEmail("jane@bücher%2e.de")).toBe("jane@bücher%2e.de");
  });

  it("spells each mailbox once: the +tag dropped, and for Gmail the dots and the googlemail.com spelling", () => {
    for (const email of ["jane.doe+promo1@gmail.com", "jane.doe+promo8@gmail.com", "j.anedoe@gmail.com", " Jane.Doe@GoogleMail.com. "]) {
      expect(canonicalMailbox(email), email).toBe("janedoe@gmail.com");
    }
    // Elsewhere the dots are the mailbox's own; the domain has its one spelling.
    expect(canonicalMailbox("Jane.Doe+news@XN--MNCHEN-3YA.de")).toBe("jane.doe@münchen.de");
    // Nothing before or after the @: no mailbox.
    for (const email of ["jane", "@gmail.com", "jane@", ""]) expect(canonicalMailbox(email), email).toBe("");
  });

  it("applies the wildcard list to subdomains", () => {
    expect(fast({ email: "shop@alias.33mail.com" }).email.disposable).toBe(true);
  });

  it("keeps ordinary providers clean", () => {
    expect(fast().email).toMatchObject({ valid: true, disposable: false, plusAddressed: false, randomLocalPart: false });
  });

  it("detects plus-addressing and random local parts", () => {
    expect(fast({ email: "jane.doe+shop@gmail.com" }).email).toMatchObject({ plusAddressed: true, randomLocalPart: false });
    for (const local of ["xk7qz9vbw3p2", "qwrtplkjhgf", "a8f3k2l9m4n7", "user8837261904", "sdlkfjweoiru", "kq8z3v7w1p0r", "a8f3k2m9", "x7k2q9p4z"]) {
      expect(fast({ email: `${local}@gmail.com` }).email.randomLocalPart, local).toBe(true);
    }
    for (const local of [
      "jennifer.lopez1985",
      "christopher.schmidt",
      "j.smith",
      "mark_twain42",
      // Long names with consonant clusters, and birth dates: people, not generators.
      "christophschwarz",
      "michaelhirschbrunner",
      "hirschbrunner1987",
      "wojciechszczepanski",
      "maria.lopez.19870312",
      "tom.baker.120587",
      // Short names with a number: no letter repeats in so few, which says nothing.
      "tom481239",
      "ab123456",
      "jack193847",
      "tom4812395",
      "john5551234567",
    ]) {
      expect(fast({ email: `${local}@gmail.com` }).email.randomLocalPart, local).toBe(false);
    }
  });

  it("marks malformed addresses invalid instead of failing", () => {
    for (const email of ["jane", "jane@", "@gmail.com", "jane..doe@gmail.com", "jane@gmail", "jane@-gmail.com"]) {
      expect(fast({ email }).email, email).toMatchObject({ present: true, valid: false, domain: "" });
    }
  });
});

describe("store signals", () => {
  it("are neutral for a first-seen user", () => {
    const input = cleanDesktopLogin();
    const store = computeStoreSignals(input, EMPTY_HISTORY_SNAPSHOT, fast(), NOW_MS);
    expect(store.velocity).toMatchObject({ available: true, burst: false, highHourly: false, multiAccountDevice: false });
    expect(store.history).toMatchObject({ available: true, userKnown: false, newDevice: false, impossibleTravel: false });
    expect(store.graph).toEqual({ available: false, linkedToFraud: false, hops: null, fraudNeighbours: 0 });
    expect(store.consortium).toEqual({ available: false, matches: 0, indicatorTypes: [] });
  });

  it("detect velocity bursts and shared devices", () => {
    const snapshot = knownUserSnapshot();
    snapshot.counts.device = { lastMinute: 6, lastHour: 25, lastDay: 40 };
    snapshot.distinctUsersPerDevice24h = 4;
    const velocity = computeStoreSignals(cleanDesktopLogin(), snapshot, fast(), NOW_MS).velocity;
    expect(velocity).toMatchObject({ burst: true, highHourly: true, highDaily: false, multiAccountDevice: true, usersPerDevice24h: 4 });
  });

  it("detect impossible travel between consecutive decisions", () => {
    const snapshot = knownUserSnapshot(); // GB one hour ago
    const fromSydney = fast({ ip: "1.1.1.1" }); // AU per the database
    const history = computeStoreSignals(cleanDesktopLogin(), snapshot, fromSydney, NOW_MS).history;
    expect(history.previousCountry).toBe("GB");
    expect(history.secondsSincePrevious).toBe(3600);
    expect(history.travelDistanceKm).toBeGreaterThan(15_000);
    expect(history.impossibleTravel).toBe(true);
    expect(history.newCountry).toBe(true);
    // A day later the same hop is possible.
    const dayLater = computeStoreSignals(cleanDesktopLogin(), snapshot, fromSydney, NOW_MS + 24 * 3600_000).history;
    expect(dayLater.impossibleTravel).toBe(false);
  });

  it.each(["datacenter", "tor"] as const)("measure no travel to, and see no new country in, a %s address: its country is not the user's", (kind) => {
    const snapshot = knownUserSnapshot(); // GB one hour ago
    const fromSydney = fast({ ip: "1.1.1.1" }); // AU per the database
    fromSydney.network[kind] = true;
    expect(userLocationCountry(fromSydney)).toBe("");
    const history = computeStoreSignals(cleanDesktopLogin(), snapshot, fromSydney, NOW_MS).history;
    expect(history).toMatchObject({ previousCountry: "GB", secondsSincePrevious: 3600, travelDistanceKm: null, travelSpeedKmh: null, impossibleTravel: false, newCountry: false });
    // The address's own signals still say where it is.
    expect(fromSydney.geo.country).toBe("AU");
    expect(userLocationCountry(fast({ ip: "1.1.1.1" }))).toBe("AU");
  });

  it("recognise known and new devices", () => {
    const snapshot = knownUserSnapshot();
    expect(computeStoreSignals(cleanDesktopLogin(), snapshot, fast(), NOW_MS).history.newDevice).toBe(false);
    const other = { ...cleanDesktopLogin(), deviceId: "vis_other" };
    expect(computeStoreSignals(other, snapshot, fast(), NOW_MS).history.newDevice).toBe(true);
  });

  it("do not know a user whose profile holds no location, device or country", () => {
    // An allowed decide from a private address (no country) without a device id: a profile with nothing in it.
    const empty = { ...EMPTY_HISTORY_SNAPSHOT, previousDecision: { atMs: NOW_MS - 3_600_000, country: "" } };
    const history = computeStoreSignals(cleanDesktopLogin(), empty, fast(), NOW_MS).history;
    expect(history).toMatchObject({ userKnown: false, newDevice: false, previousCountry: "", secondsSincePrevious: null });
    const located = { ...empty, previousDecision: { atMs: NOW_MS - 3_600_000, country: "GB" } };
    expect(computeStoreSignals(cleanDesktopLogin(), located, fast(), NOW_MS).history).toMatchObject({ userKnown: true, newDevice: true, secondsSincePrevious: 3600 });
  });

  it("compare the amount with the user's history in that currency", () => {
    const snapshot = knownUserSnapshot(); // GBP: 12 payments, max 180, mean 64
    const amountFor = (amount: number, currency: string) =>
      computeStoreSignals({ ...cleanDesktopLogin(), action: "checkout", amount, currency }, snapshot, fast(), NOW_MS).amount;
    expect(amountFor(60, "GBP")).toMatchObject({ spike: false, aboveUsual: false, newCurrency: false, historyCount: 12 });
    expect(amountFor(900, "GBP")).toMatchObject({ spike: true, ratioToMax: 5 });
    expect(amountFor(200, "GBP")).toMatchObject({ spike: false, aboveUsual: true });
    expect(amountFor(50, "usd")).toMatchObject({ currency: "USD", newCurrency: true });
    // Only a payment compares: an amount on a login, or one without a currency, is no amount to judge.
    const login = computeStoreSignals({ ...cleanDesktopLogin(), action: "login", amount: 900, currency: "GBP" }, snapshot, fast(), NOW_MS).amount;
    expect(login).toMatchObject({ value: null, spike: false, newCurrency: false });
    expect(amountFor(900, "")).toMatchObject({ value: null, currency: "", spike: false, newCurrency: false });
  });

  it("see a large jump after one or two payments, and a first high-value purchase against the account's typical one", () => {
    const base = knownUserSnapshot();
    const pay = (snapshot: typeof base, amount: number, currency = "EUR") =>
      computeStoreSignals({ ...cleanDesktopLogin(), action: "purchase", amount, currency }, snapshot, fast(), NOW_MS).amount;
    const once = { ...base, amountHistory: { EUR: { count: 1, max: 12, mean: 12 } } };
    expect(pay(once, 8_000)).toMatchObject({ spike: true, ratioToMax: 666.667 });
    expect(pay(once, 100)).toMatchObject({ spike: false, aboveUsual: false });
    // The account's 50 payments in euros are typically 60 EUR.
    const account = { count: 50, logMean: Math.log(60) };
    const newcomer = { ...base, amountHistory: {}, accountAmounts: account };
    expect(pay(newcomer, 9_500)).toMatchObject({ accountTypical: 60, firstHighValue: true, spike: false });
    expect(pay(newcomer, 200)).toMatchObject({ accountTypical: 60, firstHighValue: false });
    // Too few payments to know what is typical; and a user with a history is judged against it instead.
    expect(pay({ ...newcomer, accountAmounts: { ...account, count: 19 } }, 9_500)).toMatchObject({ accountTypical: null, firstHighValue: false });
    const regular = { ...newcomer, amountHistory: { EUR: { count: 5, max: 9_000, mean: 8_000 } } };
    expect(pay(regular, 9_500).firstHighValue).toBe(false);
  });

  it("judge the thresholds by the amounts, not by the ratios rounded for display", () => {
    const pay = (amount: number, stats: { count: number; max: number; mean: number }) =>
      computeStoreSignals(
        { ...cleanDesktopLogin(), action: "purchase", amount, currency: "GBP" },
        { ...knownUserSnapshot(), amountHistory: { GBP: stats } },
        fast(),
        NOW_MS,
      ).amount;
    // 29,999 is under 3 × 10,000 though its ratio shows as 3 (2.9999 to 3 decimals).
    expect(pay(29_999, { count: 5, max: 10_000, mean: 10_000 })).toMatchObject({ ratioToMax: 3, spike: false, aboveUsual: false });
    expect(pay(30_000, { count: 5, max: 10_000, mean: 10_000 })).toMatchObject({ ratioToMax: 3, spike: true });
    // Likewise the large jump after one payment (10 ×) and the user's average (3 ×).
    expect(pay(99_999, { count: 1, max: 10_000, mean: 10_000 })).toMatchObject({ ratioToMax: 10, spike: false });
    expect(pay(29_999, { count: 5, max: 20_000, mean: 10_000 })).toMatchObject({ ratioToMean: 3, aboveUsual: false });
    expect(pay(30_000, { count: 5, max: 20_000, mean: 10_000 })).toMatchObject({ ratioToMean: 3, aboveUsual: true });
  });

  it("judge a first high-value purchase by the account's typical payment itself, however small", () => {
    // Gold by the troy ounce: the account's payments are typically 0.0001 XAU, which shows as 0 to 3 decimals.
    const snapshot = { ...knownUserSnapshot(), amountHistory: {}, accountAmounts: { count: 40, logMean: Math.log(0.0001) } };
    const pay = (amount: number) =>
      computeStoreSignals({ ...cleanDesktopLogin(), action: "purchase", amount, currency: "XAU" }, snapshot, fast(), NOW_MS).amount;
    expect(pay(0.0002).firstHighValue).toBe(false);
    expect(pay(0).firstHighValue).toBe(false);
    expect(pay(0.001).firstHighValue).toBe(true);
  });

  it("keep the amount's ratios finite, whatever the amounts (JSON has no Infinity)", () => {
    const snapshot = { ...knownUserSnapshot(), amountHistory: { USD: { count: 4, max: 1e-300, mean: 1e-300 } } };
    const signals = computeStoreSignals({ ...cleanDesktopLogin(), action: "purchase", amount: 1e10, currency: "USD" }, snapshot, fast(), NOW_MS);
    expect(signals.amount).toMatchObject({ ratioToMax: 1e9, ratioToMean: 1e9, spike: true });
    expect(() => canonicalJson(signals)).not.toThrow();
    const largest = computeStoreSignals({ ...cleanDesktopLogin(), action: "purchase", amount: Number.MAX_VALUE, currency: "GBP" }, knownUserSnapshot(), fast(), NOW_MS);
    expect(largest.amount).toMatchObject({ ratioToMax: 1e9, spike: true });
  });

  it("carry graph and consortium results when the lookups ran", () => {
    const snapshot = { ...knownUserSnapshot(), graph: { linkedToFraud: true, hops: 2, fraudNeighbours: 3 }, consortium: { matches: 2, indicatorTypes: ["email", "device"] } };
    const store = computeStoreSignals(cleanDesktopLogin(), snapshot, fast(), NOW_MS);
    expect(store.graph).toEqual({ available: true, linkedToFraud: true, hops: 2, fraudNeighbours: 3 });
    expect(store.consortium).toEqual({ available: true, matches: 2, indicatorTypes: ["email", "device"] });
  });
});

describe("mergeSignals", () => {
  it("has the same fixed shape with and without the store path", () => {
    const fastSignals = fast();
    const partial = mergeSignals(fastSignals, null);
    const full = mergeSignals(fastSignals, computeStoreSignals(cleanDesktopLogin(), EMPTY_HISTORY_SNAPSHOT, fastSignals, NOW_MS));
    expect(partial.coverage).toBe("partial");
    expect(full.coverage).toBe("full");
    const shape = (value: unknown): unknown =>
      value !== null && typeof value === "object" && !Array.isArray(value)
        ? Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, shape(inner)]))
        : "leaf";
    expect(shape(partial)).toEqual(shape(full));
    expect(partial.velocity.available).toBe(false);
    expect(partial.lists).toEqual({ denylisted: false });
  });

  it("is plain JSON without undefined values", () => {
    const signals = mergeSignals(fast({ device: undefined, behavior: undefined, email: "", userAgent: "" }), null);
    expect(JSON.parse(JSON.stringify(signals))).toEqual(signals);
    const hasUndefined = (value: unknown): boolean =>
      value === undefined || (value !== null && typeof value === "object" && Object.values(value).some(hasUndefined));
    expect(hasUndefined(signals)).toBe(false);
  });
});

describe("deviceFingerprint", () => {
  it("is stable across browser updates and phone rotation", () => {
    const iphone = cleanIphoneLogin();
    const first = deviceFingerprint(iphone.device, USER_AGENTS.iphoneSafari);
    const updated = deviceFingerprint(iphone.device, USER_AGENTS.iphoneSafari.replace(/17_4/g, "17_5").replace("17.4", "17.5"));
    const screen = iphone.device?.screen;
    const rotated = deviceFingerprint(
      { ...iphone.device, screen: screen && { ...screen, width: screen.height, height: screen.width } },
      USER_AGENTS.iphoneSafari,
    );
    expect(first.deviceHash).toMatch(/^[0-9a-f]{12}$/);
    expect(updated.deviceHash).toBe(first.deviceHash);
    expect(rotated.canonical).toBe(first.canonical);
  });

  it("is stable across display scaling and browser zoom, which scale the CSS-pixel screen (in whole pixels) and the pixel ratio together", () => {
    const desktop = cleanDesktopLogin();
    const hashOf = (width: number, height: number, ratio: number, whole: (n: number) => number = Math.round) =>
      deviceFingerprint(
        { ...desktop.device, screen: { width: whole(width / ratio), height: whole(height / ratio), colorDepth: 24, pixelRatio: ratio } },
        USER_AGENTS.windowsChrome,
      ).deviceHash;
    // The 13-inch MacBook Air's scaled default (1470 × 956 at 2×) is 2940 wide, halfway between two multiples of 8.
    const screens = [[1366, 768], [1280, 720], [1600, 900], [1440, 900], [1920, 1080], [1536, 864], [2560, 1440], [2880, 1800], [2940, 1912], [3024, 1964], [3840, 2160]] as const;
    for (const [width, height] of screens) {
      for (const scaling of [1, 1.25, 1.5, 2]) {
        for (const zoom of [0.67, 0.8, 0.9, 1.1, 1.25, 1.5, 1.75, 2, 3]) {
          // Whole CSS pixels, rounded or cut, as browsers differ.
          for (const whole of [Math.round, Math.floor]) {
            expect(hashOf(width, height, scaling * zoom, whole), `${width}x${height} at ${scaling} x ${zoom}`).toBe(hashOf(width, height, 1));
          }
        }
      }
    }
    // A different screen is a different device.
    expect(hashOf(2560, 1440, 1)).not.toBe(hashOf(1920, 1080, 1));
    expect(hashOf(1366, 768, 1)).not.toBe(hashOf(1360, 768, 1.25));
  });

  it("differs between devices", () => {
    const desktop = cleanDesktopLogin();
    const a = deviceFingerprint(desktop.device, USER_AGENTS.windowsChrome);
    const b = deviceFingerprint({ ...desktop.device, webglRenderer: "ANGLE (Intel, Intel(R) UHD Graphics 620 Direct3D11 vs_5_0 ps_5_0, D3D11)" }, USER_AGENTS.windowsChrome);
    expect(a.deviceHash).not.toBe(b.deviceHash);
    expect(JSON.parse(a.canonical)).toMatchObject({ browser: "Chrome", os: "Windows", platform: "Win32", language: "en-gb" });
  });
});
