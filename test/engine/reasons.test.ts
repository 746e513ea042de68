import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import {
  CATEGORIES,
  DEFAULT_WEIGHTS,
  REASONS,
  REASON_CODES,
  ReferenceData,
  computeFastSignals,
  computeStoreSignals,
  mergeSignals,
  scoreSignals,
} from "../../src/engine/index.js";
import type { EngineInput, ReasonCode, Signals } from "../../src/engine/index.js";
import { POLICY_REASONS } from "../../src/policies/index.js";
import { cleanDesktopLogin, cleanIphoneLogin, knownUserSnapshot, NOW_MS, USER_AGENTS } from "./fixtures.js";
import { RISK_MUTATIONS } from "./risk-mutations.js";

let data: ReferenceData;
let cleanSignals: Signals;
beforeAll(() => {
  data = ReferenceData.load();
  const input = cleanDesktopLogin();
  const fast = computeFastSignals(input, data, NOW_MS);
  cleanSignals = mergeSignals(fast, computeStoreSignals(input, knownUserSnapshot(), fast, NOW_MS));
});

function documentedCodes(): Map<string, string> {
  const markdown = readFileSync(new URL("../../docs/reason-codes.md", import.meta.url), "utf8");
  const rows = new Map<string, string>();
  for (const match of markdown.matchAll(/^\| ([A-Z_]+) \| ([a-z]+) \|/gm)) {
    rows.set(match[1] ?? "", match[2] ?? "");
  }
  return rows;
}

describe("reason catalogue", () => {
  it("gives every code a scoring category (or overall for LOW_RISK) and a description", () => {
    for (const code of REASON_CODES) {
      const info = REASONS[code];
      expect(code === "LOW_RISK" ? info.category === "overall" : (CATEGORIES as readonly string[]).includes(info.category), code).toBe(true);
      expect(info.description.length, code).toBeGreaterThan(10);
    }
  });

  it("matches docs/reason-codes.md code for code, with the same categories", () => {
    const documented = documentedCodes();
    expect([...documented.keys()].sort()).toEqual([...REASON_CODES].sort());
    for (const code of REASON_CODES) expect(documented.get(code), code).toBe(REASONS[code].category);
  });

  it("documents the codes a deciding policy adds, and no others", () => {
    const markdown = readFileSync(new URL("../../docs/reason-codes.md", import.meta.url), "utf8");
    const documented = [...markdown.matchAll(/^\| (POLICY_[A-Z_]+) \|/gm)].map((match) => match[1]);
    expect(documented.sort()).toEqual(Object.values(POLICY_REASONS).sort());
  });

  it("every catalogue code can be emitted, under its catalogue category", () => {
    for (const [code, mutate] of Object.entries(RISK_MUTATIONS) as [Exclude<ReasonCode, "LOW_RISK">, (s: Signals) => void][]) {
      const signals = structuredClone(cleanSignals);
      mutate(signals);
      const result = scoreSignals(signals, DEFAULT_WEIGHTS);
      const contribution = result.contributions.find((c) => c.reason === code);
      expect(contribution, code).toBeDefined();
      expect(contribution?.category, code).toBe(REASONS[code].category);
      expect(result.contributions.map((c) => c.reason), code).toEqual([code]);
    }
    expect(scoreSignals(cleanSignals, DEFAULT_WEIGHTS).reasons).toEqual(["LOW_RISK"]);
  });

  it("names a new currency as a reason only once feedback has raised the amount category's weight", () => {
    const signals = structuredClone(cleanSignals);
    RISK_MUTATIONS.AMOUNT_NEW_CURRENCY(signals);
    // Weak on its own: under the default weights a point or two, in the contributions but not the reasons.
    const underDefaults = scoreSignals(signals, DEFAULT_WEIGHTS);
    expect(underDefaults.reasons).toEqual(["LOW_RISK"]);
    expect(underDefaults.contributions.map((c) => c.reason)).toEqual(["AMOUNT_NEW_CURRENCY"]);
    const amountHeavy = { version: 2, weights: { network: 0.14, device: 0.16, behavior: 0.06, email: 0.06, velocity: 0.06, identity: 0.06, amount: 0.4, graph: 0.06 } };
    expect(scoreSignals(signals, amountHeavy).reasons).toEqual(["AMOUNT_NEW_CURRENCY"]);
  });

  it("every code emitted for realistic requests is in the catalogue", () => {
    const clean = cleanDesktopLogin();
    const requests: EngineInput[] = [
      clean,
      cleanIphoneLogin(),
      { ...clean, userAgent: USER_AGENTS.headlessChrome, device: { ...clean.device, webdriver: true, languages: [] } },
      { ...clean, userAgent: USER_AGENTS.googlebot, device: undefined, behavior: undefined },
      { ...clean, userAgent: USER_AGENTS.pythonRequests, email: "qwrtplkjhgf+1@mailinator.com", ip: "2001:db8::1" },
      { ...clean, userAgent: "", ip: "10.0.0.1", email: "not-an-email" },
      { ...clean, device: { ...clean.device, platform: "MacIntel", timezone: "Asia/Tokyo" }, behavior: { timeOnPageMs: 300, keystrokes: 0, pointerMoves: 0, clicks: 0, pasteEvents: 2 } },
    ];
    const emitted = new Set<string>();
    for (const input of requests) {
      const fast = computeFastSignals(input, data, NOW_MS);
      const result = scoreSignals(mergeSignals(fast, computeStoreSignals(input, knownUserSnapshot(), fast, NOW_MS)), DEFAULT_WEIGHTS);
      for (const reason of result.reasons) emitted.add(reason);
      for (const contribution of result.contributions) emitted.add(contribution.reason);
    }
    expect(emitted.size).toBeGreaterThan(10);
    for (const code of emitted) expect(REASON_CODES, code).toContain(code);
  });
});
