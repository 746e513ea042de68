// The catalogue of reason codes the engine can emit. docs/reason-codes.md
// mirrors it for API users (a test keeps the two in step).

import type { Category } from "./weights.js";

export interface ReasonInfo {
  /** Scoring category the reason's points count towards; "overall" for LOW_RISK. */
  readonly category: Category | "overall";
  readonly description: string;
}

export const REASONS = {
  LOW_RISK: { category: "overall", description: "No signal stands out; the request looks like ordinary traffic." },

  TOR_EXIT: { category: "network", description: "The IP address is a Tor exit relay." },
  DATACENTER_IP: { category: "network", description: "The IP address belongs to a hosting or datacenter range." },
  PRIVATE_IP: {
    category: "network",
    description: "The client IP is private, CGNAT, loopback or link-local, so it does not identify the client.",
  },
  RESERVED_IP: {
    category: "network",
    description: "The client IP is a documentation, multicast, unspecified or reserved address no real client uses.",
  },
  UNKNOWN_IP_COUNTRY: {
    category: "network",
    description: "The public IP address is in no range of the country database.",
  },

  WEBDRIVER: { category: "device", description: "The browser reports navigator.webdriver = true (automation)." },
  HEADLESS_BROWSER: {
    category: "device",
    description: "The user agent is a headless browser (HeadlessChrome, PhantomJS, ...).",
  },
  AUTOMATION_TOOL: {
    category: "device",
    description: "The user agent names an automation framework or HTTP library (Selenium, curl, python-requests, ...).",
  },
  CRAWLER_USER_AGENT: { category: "device", description: "The user agent is a declared crawler or bot." },
  MISSING_USER_AGENT: { category: "device", description: "No user agent was sent." },
  VM_DETECTED: {
    category: "device",
    description: "The WebGL renderer is a virtual machine, emulator or software renderer.",
  },
  TIMEZONE_MISMATCH: {
    category: "device",
    description: "The browser's time zone is at least two hours from any offset used in the IP's country.",
  },
  PLATFORM_MISMATCH: {
    category: "device",
    description: "navigator.platform contradicts the operating system in the user agent.",
  },
  TOUCH_MISMATCH: { category: "device", description: "A mobile or tablet user agent reports no touch support." },
  IMPOSSIBLE_SCREEN: {
    category: "device",
    description: "The screen geometry is impossible or does not fit the device type.",
  },
  NO_LANGUAGES: { category: "device", description: "navigator.languages is empty." },

  BEHAVIOR_TOO_FAST: { category: "behavior", description: "The page was used faster than a person can." },
  NO_INTERACTION: {
    category: "behavior",
    description: "No key press, pointer move, click or paste happened before the action.",
  },
  PASTE_ONLY_INPUT: { category: "behavior", description: "Form input was pasted without any typing." },

  INVALID_EMAIL: { category: "email", description: "The e-mail address is malformed." },
  DISPOSABLE_EMAIL: { category: "email", description: "The e-mail domain is a disposable (throwaway) mail service." },
  RANDOM_EMAIL: { category: "email", description: "The e-mail local part looks machine-generated." },
  EMAIL_PLUS_ADDRESSING: { category: "email", description: "The e-mail address uses a +tag." },

  VELOCITY_BURST: {
    category: "velocity",
    description: "Many requests for the same user, device, e-mail or IP within the last minute.",
  },
  HIGH_VELOCITY_HOURLY: { category: "velocity", description: "Unusually many requests within the last hour." },
  HIGH_VELOCITY_DAILY: { category: "velocity", description: "Unusually many requests within the last 24 hours." },
  MULTI_ACCOUNT_DEVICE: { category: "velocity", description: "Several user ids used this device within 24 hours." },
  MULTI_ACCOUNT_IP: { category: "velocity", description: "Many user ids used this IP within 24 hours." },

  DENYLISTED: { category: "identity", description: "An entity of the request is on a deny list." },
  IMPOSSIBLE_TRAVEL: {
    category: "identity",
    description: "The user's IP country changed faster than travel allows since the previous decision.",
  },
  NEW_DEVICE: { category: "identity", description: "A known user on a device id not seen for them before." },
  NEW_COUNTRY: { category: "identity", description: "A known user from a country not seen for them before." },

  AMOUNT_SPIKE: {
    category: "amount",
    description: "The amount is at least three times the user's largest earlier amount (ten times with only one or two earlier payments).",
  },
  FIRST_HIGH_VALUE: {
    category: "amount",
    description: "A user with fewer than three earlier payments in this currency pays at least five times what is typical for the account.",
  },
  AMOUNT_ABOVE_USUAL: {
    category: "amount",
    description: "The amount is at least three times the user's average amount.",
  },
  AMOUNT_NEW_CURRENCY: {
    category: "amount",
    description: "The user has paid before, but never in this currency.",
  },

  FRAUD_GRAPH_LINK: {
    category: "graph",
    description: "An entity of the request is linked to a fraud-labelled entity within two hops.",
  },
  CONSORTIUM_MATCH: {
    category: "graph",
    description: "The shared threat-intelligence network reports an entity of the request.",
  },
} as const satisfies Record<string, ReasonInfo>;

export type ReasonCode = keyof typeof REASONS;

export const REASON_CODES = Object.keys(REASONS) as ReasonCode[];
