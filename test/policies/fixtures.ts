// Inputs shared by the policy tests and the benchmark script.

import type { Signals } from "../../src/engine/types.js";
import type { EvaluationContext, PolicyDefinition, RuleDefinition } from "../../src/policies/index.js";

/** A clean desktop login with full coverage: every category present, nothing suspicious. */
export function cleanSignals(): Signals {
  const counts = () => ({ lastMinute: 0, lastHour: 1, lastDay: 2 });
  return {
    coverage: "full",
    network: {
      ip: "81.2.69.160",
      present: true,
      valid: true,
      version: 4,
      rangeType: "public",
      private: false,
      reserved: false,
      tor: false,
      datacenter: false,
    },
    geo: { country: "GB", countryKnown: true },
    userAgent: {
      present: true,
      browser: "Chrome",
      browserMajor: 124,
      os: "Windows",
      deviceType: "desktop",
      bot: false,
      crawler: false,
      headless: false,
      automationTool: "",
      automation: false,
    },
    device: {
      present: true,
      webdriver: false,
      vm: false,
      vmIndicator: "",
      timezone: "Europe/London",
      timezoneOffsetMinutes: 60,
      timezoneMismatch: false,
      timezoneGapMinutes: 0,
      platformMismatch: false,
      touchMismatch: false,
      impossibleScreen: false,
      noLanguages: false,
    },
    behavior: {
      present: true,
      timeOnPageMs: 5200,
      formFillMs: 2100,
      keystrokes: 24,
      pointerMoves: 80,
      pasteEvents: 0,
      clicks: 3,
      tooFast: false,
      noInteraction: false,
      pasteOnly: false,
    },
    email: {
      present: true,
      valid: true,
      domain: "gmail.com",
      disposable: false,
      plusAddressed: false,
      randomLocalPart: false,
      localPartEntropy: 2.9,
    },
    velocity: {
      available: true,
      user: counts(),
      ip: counts(),
      device: counts(),
      email: counts(),
      usersPerDevice24h: 1,
      usersPerIp24h: 1,
      burst: false,
      highHourly: false,
      highDaily: false,
      multiAccountDevice: false,
      multiAccountIp: false,
    },
    amount: {
      available: true,
      value: null,
      currency: "",
      historyCount: 0,
      historyMax: 0,
      historyMean: 0,
      ratioToMax: null,
      ratioToMean: null,
      spike: false,
      aboveUsual: false,
      newCurrency: false,
      accountTypical: null,
      firstHighValue: false,
    },
    history: {
      available: true,
      userKnown: true,
      newDevice: false,
      newCountry: false,
      previousCountry: "GB",
      secondsSincePrevious: 86_400,
      travelDistanceKm: 0,
      travelSpeedKmh: 0,
      impossibleTravel: false,
    },
    graph: { available: true, linkedToFraud: false, hops: null, fraudNeighbours: 0 },
    consortium: { available: true, matches: 0, indicatorTypes: [] },
    lists: { denylisted: false },
  };
}

export function context(overrides: Partial<EvaluationContext> = {}): EvaluationContext {
  return {
    score: 10,
    action: "login",
    userId: "user_4821",
    email: "jane.doe@gmail.com",
    ip: "81.2.69.160",
    deviceId: "vis_7f3a9c",
    signals: cleanSignals(),
    ...overrides,
  };
}

let nextId = 0;

/** An active policy applying to every action, with fresh id; override any field. */
export function policy(rules: readonly RuleDefinition[], overrides: Partial<PolicyDefinition> = {}): PolicyDefinition {
  nextId++;
  return {
    id: `pol_test${String(nextId).padStart(4, "0")}`,
    version: 1,
    status: "active",
    priority: 0,
    actions: [],
    rules,
    ...overrides,
  };
}
