// Engine inputs and the signals object.
//
// The signals object is what policy rules read as `signals.*`, what the
// decision record stores and what the scorer consumes. It is plain JSON with a
// fixed shape: every category is always present and every field has a value
// (false, 0, "", [] or null for "not measured"), so rules never meet a hole.
// Field meanings are documented in docs/signals.md.

import type { IpRangeType } from "./ip.js";

/** The parts of the browser SDK's Device message the engine reads (gen/fraud/v1 Device is assignable). */
export interface DeviceInput {
  webdriver?: boolean | undefined;
  webglRenderer?: string;
  webglVendor?: string;
  timezone?: string;
  languages?: readonly string[];
  platform?: string;
  screen?: { width: number; height: number; colorDepth: number; pixelRatio: number } | undefined;
  hardwareConcurrency?: number | undefined;
  deviceMemory?: number | undefined;
  touchSupport?: { maxTouchPoints: number; touchEvent: boolean } | undefined;
}

/** The browser SDK's Behavior message (gen/fraud/v1 Behavior is assignable). */
export interface BehaviorInput {
  timeOnPageMs?: number | undefined;
  formFillMs?: number | undefined;
  keystrokes?: number | undefined;
  pointerMoves?: number | undefined;
  pasteEvents?: number | undefined;
  clicks?: number | undefined;
}

/**
 * One request as the engine sees it. DecideRequest and AnalyzeRequest from
 * gen/fraud/v1 are both assignable; empty strings mean "not given", as in proto3.
 */
export interface EngineInput {
  userId: string;
  action: string;
  email?: string;
  ip?: string;
  deviceId?: string;
  userAgent?: string;
  amount?: number | undefined;
  currency?: string;
  device?: DeviceInput | undefined;
  behavior?: BehaviorInput | undefined;
}

/** "full" when the store-backed categories were computed, "partial" for the fast path alone. */
export type SignalCoverage = "full" | "partial";

export interface NetworkSignals {
  /** Canonical address text; "" when no or an invalid address was given. */
  ip: string;
  present: boolean;
  valid: boolean;
  /** 4 or 6; 0 when missing or invalid. IPv4-mapped IPv6 counts as 4. */
  version: 0 | 4 | 6;
  rangeType: IpRangeType | "none";
  private: boolean;
  reserved: boolean;
  tor: boolean;
  datacenter: boolean;
}

export interface GeoSignals {
  /** ISO 3166-1 alpha-2 country of the IP; "" when unknown. */
  country: string;
  countryKnown: boolean;
}

export type UserAgentDeviceType = "desktop" | "mobile" | "tablet" | "other" | "unknown";

export interface UserAgentSignals {
  present: boolean;
  browser: string;
  browserMajor: number | null;
  os: string;
  deviceType: UserAgentDeviceType;
  /** Matches the isbot pattern list (crawlers, HTTP libraries, headless browsers). */
  bot: boolean;
  /** A self-declared crawler or monitoring bot, neither headless nor an automation tool. */
  crawler: boolean;
  headless: boolean;
  /** Name of the automation tool or HTTP library the UA names; "" when none. */
  automationTool: string;
  /** headless or automationTool detected. */
  automation: boolean;
}

export interface DeviceSignals {
  present: boolean;
  webdriver: boolean;
  /** Virtual machine, emulator or software WebGL renderer. */
  vm: boolean;
  /** The renderer keyword that identified the VM; "" when none. */
  vmIndicator: string;
  timezone: string;
  /** Current UTC offset of `timezone`; null when missing or not an IANA name. */
  timezoneOffsetMinutes: number | null;
  timezoneMismatch: boolean;
  /** Minutes between the time zone's offset and the closest offset used in the IP's country. */
  timezoneGapMinutes: number;
  platformMismatch: boolean;
  touchMismatch: boolean;
  impossibleScreen: boolean;
  noLanguages: boolean;
}

export interface BehaviorSignals {
  present: boolean;
  timeOnPageMs: number | null;
  formFillMs: number | null;
  keystrokes: number;
  pointerMoves: number;
  pasteEvents: number;
  clicks: number;
  tooFast: boolean;
  noInteraction: boolean;
  pasteOnly: boolean;
}

export interface EmailSignals {
  present: boolean;
  valid: boolean;
  /** Lowercased domain; "" when missing or invalid. */
  domain: string;
  disposable: boolean;
  plusAddressed: boolean;
  randomLocalPart: boolean;
  /** Shannon entropy of the local part in bits per character. */
  localPartEntropy: number;
}

export interface WindowCounts {
  lastMinute: number;
  lastHour: number;
  lastDay: number;
}

export interface VelocitySignals {
  available: boolean;
  user: WindowCounts;
  ip: WindowCounts;
  device: WindowCounts;
  email: WindowCounts;
  usersPerDevice24h: number;
  usersPerIp24h: number;
  burst: boolean;
  highHourly: boolean;
  highDaily: boolean;
  multiAccountDevice: boolean;
  multiAccountIp: boolean;
}

export interface AmountSignals {
  available: boolean;
  /** The request's amount; null when the request has none. */
  value: number | null;
  currency: string;
  historyCount: number;
  historyMax: number;
  historyMean: number;
  ratioToMax: number | null;
  ratioToMean: number | null;
  spike: boolean;
  aboveUsual: boolean;
  newCurrency: boolean;
  /** The account's typical payment in this currency (geometric mean of its allowed payments); null with too few. */
  accountTypical: number | null;
  /** A user with little history in this currency paying far above what is typical for the account. */
  firstHighValue: boolean;
}

export interface HistorySignals {
  available: boolean;
  userKnown: boolean;
  newDevice: boolean;
  newCountry: boolean;
  previousCountry: string;
  secondsSincePrevious: number | null;
  travelDistanceKm: number | null;
  travelSpeedKmh: number | null;
  impossibleTravel: boolean;
}

export interface GraphSignals {
  available: boolean;
  linkedToFraud: boolean;
  /** Hops to the nearest fraud-labelled entity (1 or 2); null when none within two hops. */
  hops: number | null;
  fraudNeighbours: number;
}

export interface ConsortiumSignals {
  available: boolean;
  matches: number;
  indicatorTypes: string[];
}

export interface ListSignals {
  denylisted: boolean;
}

export interface FastSignals {
  network: NetworkSignals;
  geo: GeoSignals;
  userAgent: UserAgentSignals;
  device: DeviceSignals;
  behavior: BehaviorSignals;
  email: EmailSignals;
}

export interface StoreSignals {
  velocity: VelocitySignals;
  amount: AmountSignals;
  history: HistorySignals;
  graph: GraphSignals;
  consortium: ConsortiumSignals;
}

export interface Signals extends FastSignals, StoreSignals {
  coverage: SignalCoverage;
  lists: ListSignals;
}

/** An account's payments in one currency: how many, and the mean of their natural logarithms. */
export interface AccountAmountStats {
  count: number;
  logMean: number;
}

/** Per-currency statistics of the user's earlier payment amounts. */
export interface AmountStats {
  count: number;
  max: number;
  mean: number;
}

/**
 * What the store knows before this request, read in the comprehensive path.
 * Counts are of earlier decisions only (the current request is not included).
 */
export interface HistorySnapshot {
  counts: { user: WindowCounts; ip: WindowCounts; device: WindowCounts; email: WindowCounts };
  /** Distinct user ids seen with this request's deviceId / IP in the last 24 hours, this user included. */
  distinctUsersPerDevice24h: number;
  distinctUsersPerIp24h: number;
  /** The user's most recent earlier decision; null for a first-seen user. */
  previousDecision: { atMs: number; country: string } | null;
  /** Device ids and IP countries seen with this user before. */
  knownDeviceIds: readonly string[];
  knownCountries: readonly string[];
  /** Keyed by ISO 4217 code. */
  amountHistory: Readonly<Record<string, AmountStats>>;
  /** The account's allowed payments in the request's currency; null without a payment or with none yet. */
  accountAmounts: AccountAmountStats | null;
  /** Filled by the fraud-graph lookup; null when it has not run. */
  graph: { linkedToFraud: boolean; hops: number | null; fraudNeighbours: number } | null;
  /** Filled by the consortium lookup; null when it has not run. */
  consortium: { matches: number; indicatorTypes: readonly string[] } | null;
}
