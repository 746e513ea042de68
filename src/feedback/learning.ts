// The learning rule of feedback (docs/feedback.md): a label moves the
// account's category weights toward the categories that would have called the
// outcome right, by at most MAX_SHIFT of the total weight, scaled by the
// label's confidence, keeping every weight within [MIN_WEIGHT, MAX_WEIGHT] and
// the set summing to 1. Only the categories that had data for the decision
// learn from it. Pure: the store applies the result with optimistic locking.

import { CATEGORIES, MAX_WEIGHT, MIN_WEIGHT, mapCategories, type Category, type CategoryWeights } from "../engine/index.js";
import type { ActualOutcome } from "../webhooks/events.js";

/** Total weight one feedback may move between categories (spec part 8: 5 %). */
export const MAX_SHIFT = 0.05;
/** Shifts smaller than this are floating-point noise, not a change of the weights. */
const NO_MOVE = 1e-9;

/** fraud, chargeback and abuse say the decision should have been risky; legitimate and valid say it was not. */
const IS_FRAUD: Readonly<Record<ActualOutcome, boolean>> = { fraud: true, chargeback: true, abuse: true, legitimate: false, valid: false };

export function isFraudOutcome(outcome: ActualOutcome): boolean {
  return IS_FRAUD[outcome];
}

/**
 * The confidence from which a label has the lasting effects beyond the weights: a fraud label marks the
 * decision's entities (graph, automatic deny lists, consortium), a legitimate one teaches the user's profile.
 */
export const SURE_CONFIDENCE = 0.5;

/** Whether a label marks its decision's entities as fraud: a fraud outcome the client is at least half sure of. */
export function marksEntities(label: { actualOutcome: ActualOutcome; confidence: number }): boolean {
  return isFraudOutcome(label.actualOutcome) && label.confidence >= SURE_CONFIDENCE;
}

/**
 * Whether a label says, surely enough to teach the user's profile, that the decision's request was the user's
 * own: a legitimate outcome the client is at least half sure of. A profile keeps what it learns for good.
 */
export function teachesProfile(label: { actualOutcome: ActualOutcome; confidence: number }): boolean {
  return !isFraudOutcome(label.actualOutcome) && label.confidence >= SURE_CONFIDENCE;
}

/** The other labels: the decision's request was the user's own. */
export const NOT_FRAUD_OUTCOMES: readonly ActualOutcome[] = (Object.keys(IS_FRAUD) as ActualOutcome[]).filter((outcome) => !IS_FRAUD[outcome]);

/** Half the L1 distance: the weight that moved from some categories to others. */
export function totalShift(from: Record<Category, number>, to: Record<Category, number>): number {
  let sum = 0;
  for (const category of CATEGORIES) sum += Math.abs(to[category] - from[category]);
  return sum / 2;
}

/**
 * The weights after one label. `categoryScores` are the decision's risks per
 * category (0..1) and `judged` the categories that had data to judge it by
 * (categoriesJudged): only they learn from it. A category that measured
 * nothing (a store read past its budget, the amount of a login) called
 * nothing, and keeps its weight.
 *
 * A judged category "called it right" by its risk for a fraud outcome and by
 * 1 − risk for a legitimate one; the target shares the judged categories'
 * combined weight in proportion to weight × rightness (a multiplicative-weights
 * target). The weights step toward it by at most MAX_SHIFT × confidence of
 * total shift, and the result is projected onto the bounds (and pulled back
 * onto the cap if the projection moved it further). The output always
 * validates, and is `current` itself when nothing moves: a label pushing a
 * category past a bound it already sits on changes nothing.
 */
export function adjustWeights(
  current: Record<Category, number>,
  categoryScores: Readonly<Record<string, number>>,
  judged: readonly Category[],
  outcome: ActualOutcome,
  confidence: number,
): Record<Category, number> {
  const fraud = isFraudOutcome(outcome);
  const judging = CATEGORIES.filter((category) => judged.includes(category));
  const rightness = (category: Category): number => {
    const risk = Math.min(1, Math.max(0, categoryScores[category] ?? 0));
    return fraud ? risk : 1 - risk;
  };
  let judgedMass = 0;
  let rightMass = 0;
  for (const category of judging) {
    judgedMass += current[category];
    rightMass += current[category] * rightness(category);
  }
  // No judged category called it right (a fraud the engine saw nothing of): there is nowhere to move toward.
  if (rightMass <= 0 || confidence <= 0) return current;
  const target = mapCategories((category) =>
    judging.includes(category) ? (judgedMass * current[category] * rightness(category)) / rightMass : current[category],
  );
  const allowed = MAX_SHIFT * Math.min(1, confidence);
  const distance = totalShift(current, target);
  // Already where the label points (a legitimate decision nothing flagged): rounding noise is no move.
  if (distance < NO_MOVE) return current;
  const step = Math.min(1, allowed / distance);
  const stepped = projectOntoBounds(mapCategories((category) => current[category] + step * (target[category] - current[category])), judging);
  const shift = totalShift(current, stepped);
  if (shift < NO_MOVE) return current;
  // The projection can only move further when a bound was hit: pull back onto the cap. Both ends are valid
  // weight sets, so every point between them is one too.
  const moved = shift <= allowed ? stepped : mapCategories((category) => current[category] + (allowed / shift) * (stepped[category] - current[category]));
  // A move too small for the answer's adjustments to show (a label of confidence 0.000001) is none: it would
  // bump the version with nothing to show, and spend the decision's one move.
  return Object.keys(weightChanges(current, moved)).length === 0 ? current : moved;
}

/** Below this a weight counts as this, so that scaling can still lift it to a bound. */
const TINY_WEIGHT = 1e-12;

/**
 * The weight set closest to `weights` in relative entropy whose `free`
 * categories lie within [MIN_WEIGHT, MAX_WEIGHT] and bring the sum to 1, the
 * other categories kept as they are: every free weight scaled by one common
 * factor λ and clamped to the bounds. A scaling, not a common shift, because
 * the weights are multiplicative: weight a capped category cannot take goes to
 * the others in proportion to their weight, so a category the labels keep
 * proving wrong never gains from another's reaching the cap. The clamped sum
 * is non-decreasing in λ, from all free weights at 2 % to all at 40 %, which
 * brackets the free share of 1 whenever the weights came from a valid set;
 * bisection over log λ finds λ.
 */
export function projectOntoBounds(weights: Record<Category, number>, free: readonly Category[] = CATEGORIES): Record<Category, number> {
  const inBounds = CATEGORIES.every((category) => weights[category] >= MIN_WEIGHT && weights[category] <= MAX_WEIGHT);
  if (inBounds && Math.abs(CATEGORIES.reduce((sum, category) => sum + weights[category], 0) - 1) < NO_MOVE) return weights;
  const clamp = (weight: number): number => Math.min(MAX_WEIGHT, Math.max(MIN_WEIGHT, weight));
  let freeShare = 1;
  for (const category of CATEGORIES) if (!free.includes(category)) freeShare -= weights[category];
  const clampedSum = (logScale: number): number => {
    const scale = Math.exp(logScale);
    return free.reduce((sum, category) => sum + clamp(Math.max(TINY_WEIGHT, weights[category]) * scale), 0);
  };
  // e^±40 takes any weight from TINY_WEIGHT to past 40 %, and any up to 1 below 2 %.
  let low = -40;
  let high = 40;
  for (let i = 0; i < 200 && high - low > 1e-14; i++) {
    const middle = (low + high) / 2;
    if (clampedSum(middle) < freeShare) low = middle;
    else high = middle;
  }
  const scale = Math.exp(high);
  return mapCategories((category) => (free.includes(category) ? clamp(Math.max(TINY_WEIGHT, weights[category]) * scale) : weights[category]));
}

/** Change per category, rounded to 6 decimals for the response; zero changes left out. */
export function weightChanges(before: CategoryWeights["weights"], after: CategoryWeights["weights"]): Record<string, number> {
  const changes: Record<string, number> = {};
  for (const category of CATEGORIES) {
    const change = Math.round((after[category] - before[category]) * 1e6) / 1e6;
    if (change !== 0) changes[category] = change;
  }
  return changes;
}
