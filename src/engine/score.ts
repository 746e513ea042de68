// Scoring: signals + category weights → score, confidence and reasons.
//
// Each rule below reads one signal and yields a risk between 0 and 1 (0: the
// rule does not fire). Two things turn risks into a score:
//
// 1. Weighted sum. A category's risk is the noisy-OR of its rules' risks
//    (1 − Π(1 − r)); the weighted sum Σ weight × categoryRisk is in 0..1.
//    Per-account weights (adjusted by feedback) act here.
// 2. Floors. Some signals are strong enough on their own that diluting them
//    by their category's weight would hide them (a Tor exit alone would be
//    18 points). Such a rule carries a floor F: firing with risk r guarantees
//    F × r points by itself. Floors of several rules combine by noisy-OR, so
//    independent strong signals reinforce each other (Tor 40 + webdriver 60
//    → 76) without passing 100.
//
// score = round(100 × (1 − (1 − weighted) × (1 − floors))). Both parts only
// grow when a rule fires or its risk rises, so adding a risk signal never
// lowers the score. DENYLISTED has a floor of 90.
//
// Points per contribution split the score in proportion to each rule's share
// of both parts, so they add up to the score. Reasons are the codes with at
// least REASON_MIN_POINTS points, strongest first; LOW_RISK when none.

import { REASONS } from "./reasons.js";
import type { ReasonCode } from "./reasons.js";
import type { Signals } from "./types.js";
import { CATEGORIES, mapCategories } from "./weights.js";
import type { Category, CategoryWeights } from "./weights.js";

interface SignalRule {
  readonly reason: Exclude<ReasonCode, "LOW_RISK">;
  /** Path of the deciding field under `signals`, as policy rules name it. */
  readonly signal: string;
  /** Points (0..100) the rule guarantees alone at risk 1. */
  readonly floor: number;
  readonly risk: (signals: Signals) => number;
}

const when = (condition: boolean, risk: number): number => (condition ? risk : 0);

/** Rules in catalogue order; a rule's category is its reason's category. */
const RULES: readonly SignalRule[] = [
  { reason: "TOR_EXIT", signal: "network.tor", floor: 40, risk: (s) => when(s.network.tor, 1) },
  { reason: "DATACENTER_IP", signal: "network.datacenter", floor: 20, risk: (s) => when(s.network.datacenter, 0.6) },
  { reason: "PRIVATE_IP", signal: "network.private", floor: 0, risk: (s) => when(s.network.private, 0.3) },
  { reason: "RESERVED_IP", signal: "network.reserved", floor: 10, risk: (s) => when(s.network.reserved, 0.5) },
  {
    reason: "UNKNOWN_IP_COUNTRY",
    signal: "geo.countryKnown",
    floor: 0,
    risk: (s) => when(s.network.rangeType === "public" && !s.geo.countryKnown, 0.2),
  },

  { reason: "WEBDRIVER", signal: "device.webdriver", floor: 60, risk: (s) => when(s.device.webdriver, 1) },
  { reason: "HEADLESS_BROWSER", signal: "userAgent.headless", floor: 60, risk: (s) => when(s.userAgent.headless, 1) },
  {
    reason: "AUTOMATION_TOOL",
    signal: "userAgent.automationTool",
    floor: 55,
    risk: (s) => when(s.userAgent.automationTool !== "", 1),
  },
  { reason: "CRAWLER_USER_AGENT", signal: "userAgent.crawler", floor: 50, risk: (s) => when(s.userAgent.crawler, 0.9) },
  {
    reason: "MISSING_USER_AGENT",
    signal: "userAgent.present",
    floor: 20,
    risk: (s) => when(!s.userAgent.present, 0.6),
  },
  { reason: "VM_DETECTED", signal: "device.vm", floor: 35, risk: (s) => when(s.device.vm, 0.8) },
  {
    reason: "TIMEZONE_MISMATCH",
    signal: "device.timezoneMismatch",
    floor: 10,
    // Half a world away is a stronger contradiction than a neighbouring zone.
    risk: (s) => when(s.device.timezoneMismatch, s.device.timezoneGapMinutes >= 240 ? 0.6 : 0.4),
  },
  {
    reason: "PLATFORM_MISMATCH",
    signal: "device.platformMismatch",
    floor: 20,
    risk: (s) => when(s.device.platformMismatch, 0.7),
  },
  { reason: "TOUCH_MISMATCH", signal: "device.touchMismatch", floor: 10, risk: (s) => when(s.device.touchMismatch, 0.5) },
  {
    reason: "IMPOSSIBLE_SCREEN",
    signal: "device.impossibleScreen",
    floor: 15,
    risk: (s) => when(s.device.impossibleScreen, 0.6),
  },
  { reason: "NO_LANGUAGES", signal: "device.noLanguages", floor: 5, risk: (s) => when(s.device.noLanguages, 0.4) },

  { reason: "BEHAVIOR_TOO_FAST", signal: "behavior.tooFast", floor: 25, risk: (s) => when(s.behavior.tooFast, 0.8) },
  {
    reason: "NO_INTERACTION",
    signal: "behavior.noInteraction",
    floor: 20,
    risk: (s) => when(s.behavior.noInteraction, 0.7),
  },
  { reason: "PASTE_ONLY_INPUT", signal: "behavior.pasteOnly", floor: 0, risk: (s) => when(s.behavior.pasteOnly, 0.3) },

  {
    reason: "INVALID_EMAIL",
    signal: "email.valid",
    floor: 10,
    risk: (s) => when(s.email.present && !s.email.valid, 0.5),
  },
  { reason: "DISPOSABLE_EMAIL", signal: "email.disposable", floor: 30, risk: (s) => when(s.email.disposable, 1) },
  { reason: "RANDOM_EMAIL", signal: "email.randomLocalPart", floor: 10, risk: (s) => when(s.email.randomLocalPart, 0.5) },
  {
    reason: "EMAIL_PLUS_ADDRESSING",
    signal: "email.plusAddressed",
    floor: 0,
    risk: (s) => when(s.email.plusAddressed, 0.15),
  },

  { reason: "VELOCITY_BURST", signal: "velocity.burst", floor: 40, risk: (s) => when(s.velocity.burst, 1) },
  {
    reason: "HIGH_VELOCITY_HOURLY",
    signal: "velocity.highHourly",
    floor: 15,
    risk: (s) => when(s.velocity.highHourly, 0.6),
  },
  {
    reason: "HIGH_VELOCITY_DAILY",
    signal: "velocity.highDaily",
    floor: 10,
    risk: (s) => when(s.velocity.highDaily, 0.4),
  },
  {
    reason: "MULTI_ACCOUNT_DEVICE",
    signal: "velocity.usersPerDevice24h",
    floor: 30,
    risk: (s) => when(s.velocity.multiAccountDevice, 0.7),
  },
  {
    reason: "MULTI_ACCOUNT_IP",
    signal: "velocity.usersPerIp24h",
    floor: 10,
    risk: (s) => when(s.velocity.multiAccountIp, 0.4),
  },

  { reason: "DENYLISTED", signal: "lists.denylisted", floor: 90, risk: (s) => when(s.lists.denylisted, 1) },
  {
    reason: "IMPOSSIBLE_TRAVEL",
    signal: "history.impossibleTravel",
    floor: 45,
    risk: (s) => when(s.history.impossibleTravel, 1),
  },
  { reason: "NEW_DEVICE", signal: "history.newDevice", floor: 0, risk: (s) => when(s.history.newDevice, 0.3) },
  { reason: "NEW_COUNTRY", signal: "history.newCountry", floor: 5, risk: (s) => when(s.history.newCountry, 0.35) },

  { reason: "AMOUNT_SPIKE", signal: "amount.ratioToMax", floor: 20, risk: (s) => when(s.amount.spike, 0.8) },
  {
    reason: "FIRST_HIGH_VALUE",
    signal: "amount.firstHighValue",
    floor: 15,
    risk: (s) => when(s.amount.firstHighValue, 0.8),
  },
  {
    reason: "AMOUNT_ABOVE_USUAL",
    signal: "amount.ratioToMean",
    floor: 5,
    risk: (s) => when(s.amount.aboveUsual, 0.4),
  },
  {
    reason: "AMOUNT_NEW_CURRENCY",
    signal: "amount.newCurrency",
    floor: 0,
    risk: (s) => when(s.amount.newCurrency, 0.2),
  },

  {
    reason: "FRAUD_GRAPH_LINK",
    signal: "graph.hops",
    floor: 50,
    // A direct link is near-proof; a second-degree one (shared device of a shared card) much less so.
    risk: (s) => when(s.graph.linkedToFraud, s.graph.hops === 1 ? 1 : 0.6),
  },
  {
    reason: "CONSORTIUM_MATCH",
    signal: "consortium.matches",
    floor: 40,
    risk: (s) => (s.consortium.matches > 0 ? Math.min(1, 0.6 + 0.1 * (s.consortium.matches - 1)) : 0),
  },
];

/** Contributions below this many points are too small to name as a reason. */
export const REASON_MIN_POINTS = 3;

export interface Contribution {
  /** Path under `signals` of the field that fired, e.g. "network.tor". */
  signal: string;
  category: Category;
  reason: ReasonCode;
  /** Share of the score, one decimal; contributions add up to the score. */
  points: number;
}

export interface ScoreResult {
  /** 0..100 integer. */
  score: number;
  /** 0..1, two decimals. */
  confidence: number;
  confidencePercent: number;
  /** Strongest first; ["LOW_RISK"] when no contribution reaches REASON_MIN_POINTS. */
  reasons: ReasonCode[];
  /** Risk per category, 0..1, three decimals. */
  categoryScores: Record<Category, number>;
  contributions: Contribution[];
  weightsVersion: number;
  /** Share (0..1) of the applicable category weight that had data. */
  coverage: number;
}

interface FiredRule {
  readonly rule: SignalRule;
  readonly category: Category;
  readonly risk: number;
}

function categoryOf(reason: Exclude<ReasonCode, "LOW_RISK">): Category {
  // The catalogue is `as const`, so only LOW_RISK can have "overall" here.
  return REASONS[reason].category;
}

const roundTo = (value: number, decimals: number): number => {
  const factor = 10 ** decimals;
  return Math.round(value * factor) / factor;
};

export function scoreSignals(signals: Signals, weights: CategoryWeights): ScoreResult {
  const fired: FiredRule[] = [];
  for (const rule of RULES) {
    const risk = Math.min(1, Math.max(0, rule.risk(signals)));
    if (risk > 0) fired.push({ rule, category: categoryOf(rule.reason), risk });
  }

  const categoryScores = mapCategories(() => 0);
  const remaining = mapCategories(() => 1);
  let floorRemaining = 1;
  for (const { rule, category, risk } of fired) {
    remaining[category] *= 1 - risk;
    floorRemaining *= 1 - (rule.floor / 100) * risk;
  }
  let weighted = 0;
  for (const category of CATEGORIES) {
    categoryScores[category] = 1 - remaining[category];
    weighted += weights.weights[category] * categoryScores[category];
  }
  const total = 1 - (1 - Math.min(1, weighted)) * floorRemaining;
  const score = Math.min(100, Math.max(0, Math.round(total * 100)));

  const contributions = attributePoints(fired, weights, score);
  const reasons: ReasonCode[] = contributions
    .filter((contribution) => contribution.points >= REASON_MIN_POINTS)
    .map((contribution) => contribution.reason);

  const withData = categoriesWithData(signals);
  const coverage = signalCoverage(withData, weights);
  const confidence = roundTo(coverage * (0.6 + 0.4 * agreement(withData, categoryScores, weights, score)), 2);

  return {
    score,
    confidence,
    confidencePercent: Math.round(confidence * 100),
    reasons: reasons.length > 0 ? reasons : ["LOW_RISK"],
    categoryScores: mapCategories((category) => roundTo(categoryScores[category], 3)),
    contributions,
    weightsVersion: weights.version,
    coverage: roundTo(coverage, 3),
  };
}

/** Splits the score over fired rules by their weighted-sum and floor strength; sorted strongest first. */
function attributePoints(fired: readonly FiredRule[], weights: CategoryWeights, score: number): Contribution[] {
  const strengths = fired.map(({ rule, category, risk }) => weights.weights[category] * risk + (rule.floor / 100) * risk);
  const totalStrength = strengths.reduce((sum, strength) => sum + strength, 0);
  const tenths = splitTenths(score, strengths, totalStrength);
  const contributions = fired.map(({ rule, category }, index) => ({
    signal: rule.signal,
    category,
    reason: rule.reason,
    points: (tenths[index] ?? 0) / 10,
  }));
  // Stable sort: equal points keep catalogue order, so output is deterministic.
  return contributions.sort((a, b) => b.points - a.points);
}

/**
 * The score's tenths of a point shared in proportion to the strengths, each
 * share rounded so that they still add up to the score (largest remainder:
 * rounding each on its own could leave the sum a tenth off).
 */
function splitTenths(score: number, strengths: readonly number[], totalStrength: number): number[] {
  if (totalStrength <= 0) return strengths.map(() => 0);
  const exact = strengths.map((strength) => (score * 10 * strength) / totalStrength);
  const shares = exact.map(Math.floor);
  let left = score * 10 - shares.reduce((sum, share) => sum + share, 0);
  // Largest remainder first; ties in catalogue order, so the result is deterministic.
  const byRemainder = exact.map((value, index) => ({ index, remainder: value - Math.floor(value) })).sort((a, b) => b.remainder - a.remainder);
  for (const { index } of byRemainder) {
    if (left <= 0) break;
    shares[index] = (shares[index] ?? 0) + 1;
    left--;
  }
  return shares;
}

/** The categories that had data to judge a request by: the ones feedback on its decision may teach. */
export function categoriesJudged(signals: Signals): Category[] {
  const withData = categoriesWithData(signals);
  return CATEGORIES.filter((category) => withData[category] === true);
}

/** Whether each category had anything to judge; null when it does not apply to this request. */
function categoriesWithData(signals: Signals): Record<Category, boolean | null> {
  return {
    network: signals.network.valid,
    device: signals.userAgent.present || signals.device.present,
    behavior: signals.behavior.present,
    email: signals.email.present,
    velocity: signals.velocity.available,
    identity: signals.history.available,
    // Only payments carry an amount; a login without one is not missing data.
    amount: signals.amount.value === null ? null : signals.amount.available,
    graph: signals.graph.available || signals.consortium.available,
  };
}

function signalCoverage(withData: Record<Category, boolean | null>, weights: CategoryWeights): number {
  let applicable = 0;
  let covered = 0;
  for (const category of CATEGORIES) {
    const hasData = withData[category];
    if (hasData === null) continue;
    applicable += weights.weights[category];
    if (hasData) covered += weights.weights[category];
  }
  return applicable > 0 ? covered / applicable : 0;
}

/**
 * How well the covered categories agree with the overall verdict: 1 when
 * every category's risk matches score/100, lower when some shout while
 * others see nothing. Weighted by category weight.
 */
function agreement(
  withData: Record<Category, boolean | null>,
  categoryScores: Record<Category, number>,
  weights: CategoryWeights,
  score: number,
): number {
  const verdict = score / 100;
  let weightSum = 0;
  let disagreement = 0;
  for (const category of CATEGORIES) {
    if (withData[category] !== true) continue;
    weightSum += weights.weights[category];
    disagreement += weights.weights[category] * Math.abs(categoryScores[category] - verdict);
  }
  return weightSum > 0 ? 1 - disagreement / weightSum : 0;
}

export type Decision = "allow" | "challenge" | "deny";

/** The default policy ("Default Thresholds"): deny from 70, challenge from 30. */
export function decideFromScore(score: number): Decision {
  if (score >= 70) return "deny";
  if (score >= 30) return "challenge";
  return "allow";
}

export type RiskLevel = "low" | "medium" | "high" | "critical";

/**
 * The coarse band /analyze returns instead of a score: low < 30 (allow),
 * medium 30–69 (challenge), high 70–84 (deny), critical ≥ 85 (deny, and past
 * the case threshold of 80 with margin).
 */
export function riskLevelFromScore(score: number): RiskLevel {
  if (score >= 85) return "critical";
  if (score >= 70) return "high";
  if (score >= 30) return "medium";
  return "low";
}

export function hasElevatedRisk(riskLevel: RiskLevel): boolean {
  return riskLevel === "high" || riskLevel === "critical";
}
