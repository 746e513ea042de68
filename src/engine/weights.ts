// Scoring categories and per-account category weights. Feedback shifts the
// weights over time (at most 5% per feedback, bounds 2%..40%, spec part 8);
// this module only defines the categories, the defaults and validation.

export const CATEGORIES = [
  "network",
  "device",
  "behavior",
  "email",
  "velocity",
  "identity",
  "amount",
  "graph",
] as const;

export type Category = (typeof CATEGORIES)[number];

/** A record with one entry per category, in CATEGORIES order. */
export function mapCategories(value: (category: Category) => number): Record<Category, number> {
  return Object.fromEntries(CATEGORIES.map((category) => [category, value(category)])) as Record<Category, number>;
}

export interface CategoryWeights {
  /** Incremented by every weight update; recorded with each decision. */
  version: number;
  weights: Record<Category, number>;
}

export const MIN_WEIGHT = 0.02;
export const MAX_WEIGHT = 0.4;
const SUM_TOLERANCE = 1e-6;

export const DEFAULT_WEIGHTS: CategoryWeights = Object.freeze({
  version: 1,
  weights: Object.freeze({
    network: 0.18,
    device: 0.2,
    behavior: 0.1,
    email: 0.1,
    velocity: 0.14,
    identity: 0.1,
    amount: 0.08,
    graph: 0.1,
  }),
});

export type WeightsValidation = { ok: true; value: CategoryWeights } | { ok: false; errors: string[] };

/**
 * Checks an untrusted value (a stored row, an admin update): a non-negative
 * integer version and exactly one weight per category, each within
 * [MIN_WEIGHT, MAX_WEIGHT], summing to 1.
 */
export function validateWeights(candidate: unknown): WeightsValidation {
  const errors: string[] = [];
  if (typeof candidate !== "object" || candidate === null) return { ok: false, errors: ["weights must be an object"] };
  const { version, weights } = candidate as { version?: unknown; weights?: unknown };
  if (typeof version !== "number" || !Number.isInteger(version) || version < 0) {
    errors.push("version must be a non-negative integer");
  }
  if (typeof weights !== "object" || weights === null) {
    return { ok: false, errors: [...errors, "weights.weights must be an object"] };
  }
  const entries = weights as Record<string, unknown>;
  for (const key of Object.keys(entries)) {
    if (!(CATEGORIES as readonly string[]).includes(key)) errors.push(`unknown category ${key}`);
  }
  let sum = 0;
  for (const category of CATEGORIES) {
    const weight = entries[category];
    if (typeof weight !== "number" || !Number.isFinite(weight)) {
      errors.push(`weight of ${category} must be a number`);
      continue;
    }
    if (weight < MIN_WEIGHT - SUM_TOLERANCE || weight > MAX_WEIGHT + SUM_TOLERANCE) {
      errors.push(`weight of ${category} must be between ${MIN_WEIGHT} and ${MAX_WEIGHT}`);
    }
    sum += weight;
  }
  if (errors.length === 0 && Math.abs(sum - 1) > SUM_TOLERANCE) errors.push(`weights must sum to 1 (got ${sum})`);
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, value: { version: version as number, weights: weights as Record<Category, number> } };
}
