// User-agent signals: browser and OS from ua-parser-js, bot detection from
// isbot, and our own patterns that tell headless browsers and automation
// tools apart from declared crawlers (the three deserve different weight).

import { isbotMatches } from "isbot";
import UAParser from "ua-parser-js";
import type { UserAgentDeviceType, UserAgentSignals } from "../types.js";

const HEADLESS_PATTERNS: readonly RegExp[] = [/HeadlessChrome/i, /PhantomJS/i, /SlimerJS/i, /HtmlUnit/i];

/**
 * Tool name reported in signals.userAgent.automationTool, and the pattern that finds it. isbot catches HTTP
 * libraries and crawlers alike, and whatever it catches that no pattern here names counts as a declared
 * crawler (a weaker signal): so every HTTP client library belongs here, not only the common ones.
 */
const AUTOMATION_TOOL_PATTERNS: readonly (readonly [string, RegExp])[] = [
  ["selenium", /selenium/i],
  ["webdriver", /webdriver/i],
  ["puppeteer", /puppeteer/i],
  ["playwright", /playwright/i],
  ["cypress", /cypress/i],
  ["nightmare", /nightmare/i],
  ["curl", /^curl\//i],
  ["wget", /^wget\//i],
  ["python-requests", /python-requests/i],
  ["python-urllib", /python-urllib/i],
  ["python-httpx", /python-httpx/i],
  ["aiohttp", /aiohttp/i],
  ["scrapy", /scrapy/i],
  ["go-http-client", /go-http-client/i],
  ["okhttp", /okhttp/i],
  ["urllib3", /^urllib3\//i],
  ["pycurl", /^pycurl\//i],
  // Java 11+'s java.net.http client sends "Java-http-client/21.0.1"; older HttpURLConnection "Java/1.8.0_392".
  ["java", /^java(-http-client)?\//i],
  ["apache-httpclient", /apache-httpclient/i],
  ["async-http-client", /^ahc\//i],
  ["reactor-netty", /^reactornetty\//i],
  ["vertx-webclient", /^vert\.x-webclient\//i],
  ["node-fetch", /node-fetch/i],
  // Node's built-in fetch (undici inside) sends just "node".
  ["node", /^node$/i],
  ["axios", /^axios\//i],
  ["undici", /undici/i],
  ["got", /^got \(/i],
  ["deno", /^deno\//i],
  ["bun", /^bun\//i],
  ["php", /^php\//i],
  ["guzzle", /^guzzlehttp\//i],
  ["symfony-httpclient", /^symfony httpclient\//i],
  ["restsharp", /^restsharp\//i],
  // PowerShell's Invoke-WebRequest dresses as a Mozilla browser on Windows, which isbot does not catch.
  ["powershell", /powershell\/\d/i],
  ["libwww-perl", /libwww-perl/i],
  ["postman", /postmanruntime/i],
  ["insomnia", /^insomnia\//i],
  ["httpie", /^httpie\//i],
  ["ruby", /^ruby$|^ruby\//i],
  ["faraday", /^faraday/i],
  ["typhoeus", /^typhoeus\b/i],
  ["mechanize", /mechanize/i],
  ["dart", /^dart\//i],
];

const DEVICE_TYPES: Readonly<Record<string, UserAgentDeviceType>> = {
  mobile: "mobile",
  tablet: "tablet",
  console: "other",
  smarttv: "other",
  wearable: "other",
  embedded: "other",
};

const NO_USER_AGENT: UserAgentSignals = Object.freeze({
  present: false,
  browser: "",
  browserMajor: null,
  os: "",
  deviceType: "unknown",
  bot: false,
  crawler: false,
  headless: false,
  automationTool: "",
  automation: false,
});

// Parsing costs tens of microseconds and real traffic repeats a small set of
// user agents, so results are memoised. The cache is dropped wholesale when
// full: cheaper than LRU bookkeeping and bounded under a flood of random UAs.
const cache = new Map<string, UserAgentSignals>();
const CACHE_LIMIT = 5000;

export function computeUserAgentSignals(userAgent: string): UserAgentSignals {
  const text = userAgent.trim();
  if (text === "") return NO_USER_AGENT;
  const cached = cache.get(text);
  if (cached !== undefined) return cached;
  const signals = parseUserAgent(text);
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(text, signals);
  return signals;
}

function parseUserAgent(text: string): UserAgentSignals {
  const parsed = new UAParser(text).getResult();
  const browser = parsed.browser.name ?? "";
  const os = parsed.os.name ?? "";
  const major = Number.parseInt(parsed.browser.major ?? "", 10);
  const headless = browser === "Chrome Headless" || HEADLESS_PATTERNS.some((pattern) => pattern.test(text));
  const automationTool = headless ? "" : (AUTOMATION_TOOL_PATTERNS.find(([, pattern]) => pattern.test(text))?.[0] ?? "");
  // isbot takes any ".com" for a crawler's contact address. In a real browser's user agent, with nothing else
  // a crawler would say, it is an in-app browser naming its shop ("AmazonApp/Amazon.com/23.7.2"), not a crawler.
  const botMatches = isbotMatches(text);
  const bot = botMatches.length > 0 && !(browser !== "" && botMatches.every((match) => match.toLowerCase() === ".com"));
  const deviceType =
    DEVICE_TYPES[parsed.device.type ?? ""] ?? (browser !== "" || os !== "" ? "desktop" : "unknown");
  return Object.freeze({
    present: true,
    browser,
    browserMajor: Number.isNaN(major) ? null : major,
    os,
    deviceType,
    bot,
    crawler: bot && !headless && automationTool === "",
    headless,
    automationTool,
    automation: headless || automationTool !== "",
  });
}
