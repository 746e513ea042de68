// Public API of the decision engine. Everything here is pure (no I/O) except
// ReferenceData loading and list reloading.

export { REASONS, REASON_CODES } from "./reasons.js";
export type { ReasonCode, ReasonInfo } from "./reasons.js";
export { CATEGORIES, DEFAULT_WEIGHTS, MAX_WEIGHT, MIN_WEIGHT, mapCategories, validateWeights } from "./weights.js";
export type { Category, CategoryWeights, WeightsValidation } from "./weights.js";
export { ReferenceData, DEFAULT_DATACENTER_RANGES_PATH } from "./reference-data.js";
export type { ListError, ReferenceDataOptions, SharedReferenceData } from "./reference-data.js";
export { computeFastSignals, computeStoreSignals, mergeSignals, paymentOf, userLocationCountry, EMPTY_HISTORY_SNAPSHOT } from "./signals.js";
export {
  scoreSignals,
  categoriesJudged,
  decideFromScore,
  riskLevelFromScore,
  hasElevatedRisk,
  REASON_MIN_POINTS,
} from "./score.js";
export type { Contribution, Decision, RiskLevel, ScoreResult } from "./score.js";
export { deviceFingerprint, visitorKey } from "./fingerprint.js";
export type { DeviceFingerprint } from "./fingerprint.js";
export { parseIp, classifyIp, clientNetwork, publicClientNetwork, publicIpText } from "./ip.js";
export { canonicalEmail, canonicalMailbox } from "./signals/email.js";
export type { IpRangeType, ParsedIp } from "./ip.js";
export type * from "./types.js";
