import { beforeAll, describe, expect, it } from "vitest";
import {
  CATEGORIES,
  DEFAULT_WEIGHTS,
  ReferenceData,
  REASON_MIN_POINTS,
  computeFastSignals,
  computeStoreSignals,
  decideFromScore,
  EMPTY_HISTORY_SNAPSHOT,
  hasElevatedRisk,
  mergeSignals,
  riskLevelFromScore,
  scoreSignals,
  validateWeights,
} from "../../src/engine/index.js";
import type { CategoryWeights, EngineInput, HistorySnapshot, ReasonCode, Signals } from "../../src/engine/index.js";
import { cleanDesktopLogin, cleanIphoneLogin, knownUserSnapshot, NOW_MS, TOR_BULK_EXIT_LIST, USER_AGENTS } from "./fixtures.js";
import { RISK_MUTATIONS } from "./risk-mutations.js";
import { FastPath, analyzeOutcome } from "../../src/decisions/fast-path.js";
import { seededRandom } from "../helpers/random.js";
import { canonicalJson } from "../../src/canonical-json.js";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../helpers/temp-dirs.js";

let data: ReferenceData;
beforeAll(() => {
  const torPath = join(tempDir("engine-score-"), "tor.txt");
  writeFileSync(torPath, TOR_BULK_EXIT_LIST);
  data = ReferenceData.load({ torExitListPath: torPath });
});

function fullSignals(input: EngineInput, snapshot: HistorySnapshot = knownUserSnapshot()): Signals {
  const fast = computeFastSignals(input, data, NOW_MS);
  return mergeSignals(fast, computeStoreSignals(input, snapshot, fast, NOW_MS));
}

function cleanSignals(): Signals {
  return fullSignals(cleanDesktopLogin());
}

function withMutations(codes: readonly Exclude<ReasonCode, "LOW_RISK">[], base: Signals = cleanSignals()): Signals {
  const signals = structuredClone(base);
  for (const code of codes) RISK_MUTATIONS[code](signals);
  return signals;
}

const ALL_CODES = Object.keys(RISK_MUTATIONS) as Exclude<ReasonCode, "LOW_RISK">[];

describe("clean traffic", () => {
  it("a realistic desktop Chrome login scores low with LOW_RISK alone", () => {
    const result = scoreSignals(cleanSignals(), DEFAULT_WEIGHTS);
    expect(result.score).toBeLessThan(30);
    expect(result.reasons).toEqual(["LOW_RISK"]);
    expect(decideFromScore(result.score)).toBe("allow");
    expect(result.confidence).toBeGreaterThan(0.8);
  });

  it("so does a first-seen user and an iPhone", () => {
    for (const signals of [fullSignals(cleanDesktopLogin(), EMPTY_HISTORY_SNAPSHOT), fullSignals(cleanIphoneLogin())]) {
      const result = scoreSignals(signals, DEFAULT_WEIGHTS);
      expect(result.score).toBeLessThan(30);
      expect(result.reasons).toEqual(["LOW_RISK"]);
    }
  });
});

describe("strong signals", () => {
  it("Tor exit + webdriver + VM renderer + disposable e-mail + velocity burst reach 80+", () => {
    const clean = cleanDesktopLogin();
    const input: EngineInput = {
      ...clean,
      ip: "185.220.101.45",
      email: "x7kq2@mailinator.com",
      device: {
        ...clean.device,
        webdriver: true,
        webglRenderer: "ANGLE (VMware, Inc., VMware SVGA 3D (Microsoft Corporation - WDDM), D3D11)",
      },
    };
    const snapshot = { ...knownUserSnapshot(), counts: { ...knownUserSnapshot().counts, ip: { lastMinute: 14, lastHour: 40, lastDay: 90 } } };
    const result = scoreSignals(fullSignals(input, snapshot), DEFAULT_WEIGHTS);
    expect(result.score).toBeGreaterThanOrEqual(80);
    expect(result.reasons).toEqual(expect.arrayContaining(["TOR_EXIT", "WEBDRIVER", "VM_DETECTED", "DISPOSABLE_EMAIL", "VELOCITY_BURST"]));
    expect(decideFromScore(result.score)).toBe("deny");
    expect(riskLevelFromScore(result.score)).toBe("critical");
  });

  it("Tor exit + a headless browser is a deny on its own", () => {
    const input = { ...cleanDesktopLogin(), ip: "185.220.101.1", userAgent: USER_AGENTS.headlessChrome, device: undefined };
    const result = scoreSignals(fullSignals(input), DEFAULT_WEIGHTS);
    expect(result.score).toBeGreaterThanOrEqual(70);
    expect(result.reasons.slice(0, 2).sort()).toEqual(["HEADLESS_BROWSER", "TOR_EXIT"]);
  });

  it("one strong signal alone challenges rather than passes", () => {
    for (const code of ["TOR_EXIT", "WEBDRIVER", "HEADLESS_BROWSER", "VELOCITY_BURST", "IMPOSSIBLE_TRAVEL"] as const) {
      const result = scoreSignals(withMutations([code]), DEFAULT_WEIGHTS);
      expect(result.score, code).toBeGreaterThanOrEqual(30);
      expect(result.reasons[0], code).toBe(code);
    }
  });

  it("curl with no browser data scores at least a challenge", () => {
    const input: EngineInput = { userId: "u", action: "login", ip: "8.8.8.8", userAgent: USER_AGENTS.curl };
    const result = scoreSignals(mergeSignals(computeFastSignals(input, data, NOW_MS), null), DEFAULT_WEIGHTS);
    expect(result.score).toBeGreaterThanOrEqual(30);
    expect(result.reasons[0]).toBe("AUTOMATION_TOOL");
  });

  it("an HTTP library that isbot does not tell from a crawler, or PowerShell dressed as a browser, is AUTOMATION_TOOL", () => {
    for (const userAgent of [
      "Java-http-client/21.0.1",
      "got (https://github.com/sindresorhus/got)",
      "Mozilla/5.0 (Windows NT 10.0; Microsoft Windows 10.0.22631; en-US) PowerShell/7.4.1",
    ]) {
      const input: EngineInput = { userId: "u", action: "login", ip: "8.8.8.8", userAgent };
      const result = scoreSignals(mergeSignals(computeFastSignals(input, data, NOW_MS), null), DEFAULT_WEIGHTS);
      expect(result.reasons[0], userAgent).toBe("AUTOMATION_TOOL");
      expect(result.reasons, userAgent).not.toContain("CRAWLER_USER_AGENT");
      expect(result.score, userAgent).toBeGreaterThanOrEqual(30);
    }
  });

  it("a denylisted entity forces a score of at least 90", () => {
    expect(scoreSignals(withMutations(["DENYLISTED"]), DEFAULT_WEIGHTS).score).toBeGreaterThanOrEqual(90);
    const listed = mergeSignals(computeFastSignals(cleanDesktopLogin(), data, NOW_MS), null, { denylisted: true });
    expect(scoreSignals(listed, DEFAULT_WEIGHTS)).toMatchObject({ reasons: ["DENYLISTED"] });
  });
});

describe("properties", () => {
  it("stays within bounds for every combination tried", () => {
    const random = seededRandom(7);
    for (let trial = 0; trial < 300; trial++) {
      const codes = ALL_CODES.filter(() => random() < 0.3);
      const result = scoreSignals(withMutations(codes), DEFAULT_WEIGHTS);
      expect(Number.isInteger(result.score)).toBe(true);
      expect(result.score).toBeGreaterThanOrEqual(0);
      expect(result.score).toBeLessThanOrEqual(100);
      expect(result.confidence).toBeGreaterThanOrEqual(0);
      expect(result.confidence).toBeLessThanOrEqual(1);
      expect(result.confidencePercent).toBe(Math.round(result.confidence * 100));
      for (const category of CATEGORIES) {
        expect(result.categoryScores[category]).toBeGreaterThanOrEqual(0);
        expect(result.categoryScores[category]).toBeLessThanOrEqual(1);
      }
    }
    expect(scoreSignals(withMutations(ALL_CODES), DEFAULT_WEIGHTS).score).toBeLessThanOrEqual(100);
  });

  it("keeps the signals storable and the score in bounds for any numbers the API accepts", () => {
    // Finite non-negative doubles and uint32 values (what validation lets through), at their extremes, against
    // histories stored from such requests. An overflow to Infinity once failed decides with 500.
    const random = seededRandom(11);
    const pick = <T,>(values: readonly T[]): T => values[Math.floor(random() * values.length)] as T;
    const doubles = [0, 5e-324, 1e-300, 0.5, 3, 1e6, 2 ** 53, 1e300, Number.MAX_VALUE];
    const uints = [0, 1, 7, 1000, 4_294_967_295];
    const maybe = <T,>(value: T): T | undefined => (random() < 0.7 ? value : undefined);
    for (let trial = 0; trial < 400; trial++) {
      const input: EngineInput = {
        ...cleanDesktopLogin(),
        action: pick(["login", "purchase", "transfer", "signup"]),
        amount: maybe(pick(doubles)),
        currency: pick(["USD", "GBP", ""]),
        device: {
          ...cleanDesktopLogin().device,
          screen: { width: pick(uints), height: pick(uints), colorDepth: pick(uints), pixelRatio: pick(doubles) },
          hardwareConcurrency: maybe(pick(uints)),
          deviceMemory: maybe(pick(doubles)),
          touchSupport: { maxTouchPoints: pick(uints), touchEvent: random() < 0.5 },
        },
        behavior: {
          timeOnPageMs: maybe(pick(doubles)),
          formFillMs: maybe(pick(doubles)),
          keystrokes: maybe(pick(uints)),
          pointerMoves: maybe(pick(uints)),
          pasteEvents: maybe(pick(uints)),
          clicks: maybe(pick(uints)),
        },
      };
      const stats = { count: pick(uints), max: pick(doubles), mean: pick(doubles) };
      const snapshot: HistorySnapshot = {
        ...knownUserSnapshot(),
        amountHistory: { USD: stats, GBP: { ...stats, max: pick(doubles) } },
        previousDecision: { atMs: NOW_MS - pick([0, 1, 60_000, 1e12]), country: pick(["GB", "AU", "US"]) },
      };
      const signals = fullSignals(input, snapshot);
      expect(() => canonicalJson(signals)).not.toThrow();
      const result = scoreSignals(signals, DEFAULT_WEIGHTS);
      expect(Number.isInteger(result.score) && result.score >= 0 && result.score <= 100).toBe(true);
      expect(result.confidence >= 0 && result.confidence <= 1).toBe(true);
      expect(() => canonicalJson(result)).not.toThrow();
    }
  });

  it("is deterministic", () => {
    const signals = withMutations(["TOR_EXIT", "NEW_DEVICE", "RANDOM_EMAIL"]);
    expect(scoreSignals(structuredClone(signals), DEFAULT_WEIGHTS)).toEqual(scoreSignals(signals, DEFAULT_WEIGHTS));
  });

  it("never lowers the score when a risk signal is added", () => {
    const random = seededRandom(42);
    for (let trial = 0; trial < 300; trial++) {
      const codes = ALL_CODES.filter(() => random() < 0.2);
      const extra = ALL_CODES[Math.floor(random() * ALL_CODES.length)] ?? "TOR_EXIT";
      const before = scoreSignals(withMutations(codes), DEFAULT_WEIGHTS).score;
      const after = scoreSignals(withMutations([...codes, extra]), DEFAULT_WEIGHTS).score;
      expect(after, `${codes.join(",")} + ${extra}`).toBeGreaterThanOrEqual(before);
    }
  });

  it("splits the score into contributions, strongest first", () => {
    const result = scoreSignals(withMutations(["TOR_EXIT", "VM_DETECTED", "NEW_DEVICE", "EMAIL_PLUS_ADDRESSING"]), DEFAULT_WEIGHTS);
    const tenths = (r: typeof result) => r.contributions.reduce((sum, contribution) => sum + Math.round(contribution.points * 10), 0);
    expect(tenths(result)).toBe(result.score * 10);
    // Exactly, whatever fired: each share is rounded so that the tenths still add up.
    const random = seededRandom(7);
    for (let trial = 0; trial < 2_000; trial++) {
      const combination = scoreSignals(withMutations(ALL_CODES.filter(() => random() < 0.15)), DEFAULT_WEIGHTS);
      expect(tenths(combination)).toBe(combination.contributions.length > 0 ? combination.score * 10 : 0);
    }
    const points = result.contributions.map((contribution) => contribution.points);
    expect(points).toEqual([...points].sort((a, b) => b - a));
    expect(result.contributions[0]).toMatchObject({ signal: "network.tor", category: "network", reason: "TOR_EXIT" });
    // Small contributions are kept in the breakdown but not named as reasons.
    const small = result.contributions.filter((contribution) => contribution.points < REASON_MIN_POINTS);
    expect(small.length).toBeGreaterThan(0);
    expect(result.reasons).toEqual(
      result.contributions.filter((c) => c.points >= REASON_MIN_POINTS).map((c) => c.reason),
    );
  });

  it("is less confident with the fast path alone", () => {
    const input = cleanDesktopLogin();
    const fast = computeFastSignals(input, data, NOW_MS);
    const partial = scoreSignals(mergeSignals(fast, null), DEFAULT_WEIGHTS);
    const full = scoreSignals(fullSignals(input), DEFAULT_WEIGHTS);
    expect(partial.confidence).toBeLessThan(full.confidence);
    expect(partial.coverage).toBeLessThan(full.coverage);
    // A request without browser data covers less than one with it.
    const bare = scoreSignals(mergeSignals(computeFastSignals({ userId: "u", action: "login", ip: "8.8.8.8", userAgent: USER_AGENTS.windowsChrome }, data, NOW_MS), null), DEFAULT_WEIGHTS);
    expect(bare.confidence).toBeLessThan(partial.confidence);
  });

  it("counts a payment's amount as missing data when the fast path answers alone", () => {
    const fastPath = new FastPath(data);
    const outcome = (input: EngineInput) =>
      fastPath.outcome({ tenant: { accountId: "acc_1", environment: "test" }, input, entities: { userId: input.userId, ip: "", deviceId: "", email: "" }, nowMs: NOW_MS, weights: DEFAULT_WEIGHTS, denylisted: false });
    const login = outcome(cleanDesktopLogin());
    const payment = outcome({ ...cleanDesktopLogin(), action: "purchase", amount: 60, currency: "GBP" });
    // network, device, behaviour and e-mail (0.58) of all eight categories for a payment; of all but amount for a login.
    expect(login.result.coverage).toBe(0.63);
    expect(payment.result.coverage).toBe(0.58);
    expect(payment.result.confidence).toBeLessThan(login.result.confidence);
    expect(payment.signals.amount).toMatchObject({ available: false, value: 60, currency: "GBP", spike: false });
  });

  it("gives analyze its share of a fast outcome: score, reasons and coverage, and the signals only when asked for", () => {
    const fastPath = new FastPath(data);
    const outcome = (input: EngineInput) =>
      fastPath.outcome({ tenant: { accountId: "acc_1", environment: "test" }, input, entities: { userId: input.userId, ip: "", deviceId: "", email: "" }, nowMs: NOW_MS, weights: DEFAULT_WEIGHTS, denylisted: false });
    const browser = outcome(cleanDesktopLogin());
    const lean = analyzeOutcome(browser, { withSignals: false });
    expect(lean).toEqual({ score: browser.result.score, reasons: browser.result.reasons, signalCoverage: "full", signals: undefined });
    expect(analyzeOutcome(browser, { withSignals: true }).signals).toBe(browser.signals);
    const { device: _device, ...withoutDevice } = cleanDesktopLogin();
    expect(analyzeOutcome(outcome(withoutDevice), { withSignals: false }).signalCoverage).toBe("partial");
    expect(analyzeOutcome(outcome({ userId: "u", action: "login", ip: "8.8.8.8" }), { withSignals: false }).signalCoverage).toBe("minimal");
  });

  it("is less confident when categories disagree", () => {
    const agreeing = scoreSignals(cleanSignals(), DEFAULT_WEIGHTS);
    const disagreeing = scoreSignals(withMutations(["TOR_EXIT"]), DEFAULT_WEIGHTS);
    expect(disagreeing.confidence).toBeLessThan(agreeing.confidence);
  });

  it("uses the account's weights and records their version", () => {
    const networkHeavy: CategoryWeights = {
      version: 9,
      weights: { network: 0.4, device: 0.1, behavior: 0.1, email: 0.1, velocity: 0.1, identity: 0.1, amount: 0.05, graph: 0.05 },
    };
    const signals = withMutations(["DATACENTER_IP"]);
    const heavy = scoreSignals(signals, networkHeavy);
    expect(heavy.weightsVersion).toBe(9);
    expect(heavy.score).toBeGreaterThan(scoreSignals(signals, DEFAULT_WEIGHTS).score);
  });
});

describe("validateWeights", () => {
  it("accepts the defaults", () => {
    expect(validateWeights(DEFAULT_WEIGHTS)).toEqual({ ok: true, value: DEFAULT_WEIGHTS });
    expect(Object.values(DEFAULT_WEIGHTS.weights).reduce((a, b) => a + b, 0)).toBeCloseTo(1, 10);
  });

  it("rejects weights out of bounds, not summing to 1, unknown or missing", () => {
    const base = DEFAULT_WEIGHTS.weights;
    const cases: unknown[] = [
      null,
      { version: 1 },
      { version: -1, weights: base },
      { version: 1, weights: { ...base, network: 0.5, device: 0.02, velocity: 0.0 } },
      { version: 1, weights: { ...base, network: 0.01, device: 0.37 } },
      { version: 1, weights: { ...base, network: 0.2 } },
      { version: 1, weights: { ...base, lists: 0.1 } },
      { version: 1, weights: { network: 0.5, device: 0.5 } },
    ];
    for (const candidate of cases) {
      const result = validateWeights(candidate);
      expect(result.ok, JSON.stringify(candidate)).toBe(false);
    }
    const sum = validateWeights({ version: 1, weights: { ...base, network: 0.2 } });
    expect(sum.ok === false && sum.errors).toEqual(["weights must sum to 1 (got 1.02)"]);
  });
});

describe("decision helpers", () => {
  it("apply the default thresholds", () => {
    expect([0, 29, 30, 69, 70, 100].map(decideFromScore)).toEqual(["allow", "allow", "challenge", "challenge", "deny", "deny"]);
  });

  it("band scores for /analyze", () => {
    expect([0, 29, 30, 69, 70, 84, 85, 100].map(riskLevelFromScore)).toEqual([
      "low", "low", "medium", "medium", "high", "high", "critical", "critical",
    ]);
    expect((["low", "medium", "high", "critical"] as const).map(hasElevatedRisk)).toEqual([false, false, true, true]);
  });
});
