import { createHmac } from "node:crypto";
import { create, fromBinary, fromJson, toBinary, toJson, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  DecideRequestSchema,
  DecideResponseSchema,
  DecisionRecordSchema,
  type AnalyzeRequest,
  type DecideRequest,
  type DecisionService,
} from "../../gen/fraud/v1/decision_pb.js";
import { callContext } from "../api/context.js";
import { codePoints } from "../code-points.js";
import { caseForDecision } from "../cases/case-service.js";
import { callerScope } from "./scope.js";
import { apiError } from "../api/errors.js";
import { canonicalJson, sha256Hex } from "../canonical-json.js";
import type { Clock } from "../clock.js";
import type { DecisionEngine } from "../decisions/engine.js";
import type { AnalyzeOutcome } from "../decisions/engine-types.js";
import type { DecisionDetails, PolicyResultRecord } from "../decisions/record.js";
import type { DecisionWriter, PolicyEffects } from "../decisions/writer.js";
import type { PolicyInputs, PolicySets, TenantPolicies } from "../decisions/policy-set.js";
import type { Metrics } from "../observability/metrics.js";
import { decidedByOwnPolicy, decisionReasons, type PolicyEvaluation, type PolicyResult } from "../policies/index.js";
import {
  decideFromScore,
  deviceFingerprint,
  hasElevatedRisk,
  paymentOf,
  riskLevelFromScore,
  userLocationCountry,
  visitorKey,
  type EngineInput,
  type Signals,
} from "../engine/index.js";
import { entityKeysByKind, entityValueOfKind, metadataIdentifiers } from "../graph/entities.js";
import { newId } from "../ids.js";
import type { Logger } from "../log.js";
import type { AccountRepository } from "../store/accounts.js";
import type { AnalyzeStateRepository } from "../store/analyze-state.js";
import type { DecisionRepository, StoredDecision } from "../store/decisions.js";
import { lessonPayment, type DecisionEntities } from "../store/history.js";
import type { IdempotencyRepository } from "../store/idempotency.js";
import type { Tenant } from "../store/tenant.js";
import type { WeightsRepository } from "../store/weights.js";
import type { DecisionsInFlight } from "../decisions/in-flight.js";

/** A policy result as stored with the decision. */
function resultRecord(result: PolicyResult): PolicyResultRecord {
  return {
    policyId: result.policyId,
    policyVersion: result.version,
    mode: result.mode,
    matchedRule: result.matchedRule,
    action: result.action ?? "",
    error: result.errors.map((error) => `rule ${error.ruleIndex}: ${error.message}`).join("; "),
  };
}

/** The side effects a policy evaluation asks for, carried into the decide's transaction. */
function policyEffects(policies: TenantPolicies, evaluation: PolicyEvaluation): PolicyEffects {
  const describe = (result: PolicyResult) => {
    const entry = policies.byId.get(result.policyId);
    const rule = entry?.compiled.rules[result.matchedRule];
    return { name: entry?.name ?? result.policyId, rule };
  };
  const triggered: PolicyEffects["triggered"] = [];
  for (const result of [...evaluation.results, ...evaluation.shadowResults]) {
    const { name, rule } = describe(result);
    // The built-in thresholds fire on every challenge and deny; decision.* events already say that.
    if (!rule || policies.byId.get(result.policyId)?.compiled.builtIn) continue;
    triggered.push({
      policyId: result.policyId,
      policyName: name,
      policyStatus: result.mode,
      ruleIndex: rule.index,
      rule: { condition: rule.condition, action: rule.action, description: rule.description },
      applied: result.mode === "active" && evaluation.decidedBy?.policyId === result.policyId,
    });
  }
  return {
    triggered,
    decidedBy: evaluation.decidedBy?.policyId,
    shadowResults: evaluation.shadowResults.map((result, index) => {
      const { name, rule } = describe(result);
      return {
        policyId: result.policyId,
        policyName: name,
        decision: evaluation.shadowDecisions[index] ?? evaluation.decision,
        matchedRules: rule ? [rule.index] : [],
      };
    }),
  };
}

/** Whether one of the request's entities is on one of the account's deny lists. */
function onDenyList(policies: TenantPolicies, entities: DecisionEntities): boolean {
  return policies.denyLists.some((list) => {
    const value = entityValueOfKind(entities, list.kind);
    return value !== "" && policies.lists.contains(list.name, value);
  });
}

/** Hexadecimal digits of the keyed hash in a visitor or device fingerprint id (`vis_`, `dfp_`). */
const KEYED_ID_HEX_DIGITS = 24;
/** A visitor id as analyze gives it. */
const VISITOR_ID = new RegExp(`^vis_[0-9a-f]{${KEYED_ID_HEX_DIGITS}}$`);

/** How long analyze keeps its per-visitor state. */
const ANALYZE_STATE_TTL_MS = 24 * 60 * 60 * 1000;
const IDEMPOTENCY_KEY_MAX = 255;

/**
 * An Idempotency-Key's length in characters. Node reads a header's bytes as latin1, one character per byte:
 * a key the client wrote in UTF-8 (`ключ`, an emoji) is counted as the characters those bytes spell.
 */
function idempotencyKeyLength(header: string): number {
  return /[^\x00-\x7f]/.test(header) ? codePoints(Buffer.from(header, "latin1").toString("utf8")) : header.length;
}

export interface DecisionServiceDeps {
  clock: Clock;
  logger: Logger;
  engine: DecisionEngine;
  writer: DecisionWriter;
  decisions: DecisionRepository<DecisionDetails>;
  idempotency: IdempotencyRepository;
  weights: WeightsRepository;
  accounts: AccountRepository;
  analyzeState: AnalyzeStateRepository;
  policies: PolicySets;
  metrics: Metrics;
  /** Decides admitted and not yet stored, which the engine counts with the stored ones. */
  inFlight: DecisionsInFlight;
}

/** The caller's tenant and key (from the shared scope), and what the transport knows of the call (its context). */
function callOf(ctx: HandlerContext) {
  const context = callContext(ctx.values);
  return { ...callerScope(ctx.values), clientIp: context.clientIp, requestId: context.requestId, context };
}

function engineInput(request: DecideRequest | AnalyzeRequest, ip: string): EngineInput {
  return {
    userId: request.userId,
    action: request.action,
    email: request.email,
    ip,
    deviceId: request.deviceId,
    userAgent: request.userAgent,
    amount: "amount" in request ? request.amount : undefined,
    currency: "currency" in request ? request.currency : "",
    device: request.device,
    behavior: request.behavior,
  };
}

function entitiesOf(input: EngineInput): DecisionEntities {
  return { userId: input.userId, ip: input.ip ?? "", deviceId: input.deviceId ?? "", email: input.email ?? "" };
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

/** What policy rules read of a decide or an analyze (analyze has no amount). */
function policyInputs(request: DecideRequest | AnalyzeRequest, ip: string, score: number, signals: Signals): PolicyInputs {
  return {
    score,
    action: request.action,
    userId: request.userId,
    ...("amount" in request && { amount: request.amount, currency: request.currency }),
    email: request.email,
    ip,
    deviceId: request.deviceId,
    metadata: request.metadata,
    signals,
  };
}

export function createDecisionService(deps: DecisionServiceDeps): ServiceImpl<typeof DecisionService> {
  const hashKeys = new Map<string, Buffer>();
  const keyedId = (accountId: string, purpose: string, value: string): string => {
    let key = hashKeys.get(accountId);
    if (!key) {
      key = deps.accounts.hashKey(accountId);
      if (!key) throw new Error(`account ${accountId} has no hash key`);
      hashKeys.set(accountId, key);
    }
    return createHmac("sha256", key).update(`${purpose}:${value}`).digest("hex").slice(0, KEYED_ID_HEX_DIGITS);
  };

  return {
    async decide(request, ctx) {
      const started = performance.now();
      const { tenant, actor, clientIp, requestId, keyKind, context } = callOf(ctx);
      const now = deps.clock.now();
      const ip = request.ip || clientIp;
      // Messages are plain objects: the request with its resolved address is a shallow copy of it.
      const resolved: DecideRequest = { ...request, ip };

      const header = ctx.requestHeader.get("idempotency-key")?.trim();
      let requestHash = "";
      if (header !== undefined && (header === "" || idempotencyKeyLength(header) > IDEMPOTENCY_KEY_MAX)) {
        throw apiError("VALIDATION_ERROR", `Idempotency-Key must be 1 to ${IDEMPOTENCY_KEY_MAX} characters`, {
          fieldViolations: [{ field: "Idempotency-Key", description: `must be 1 to ${IDEMPOTENCY_KEY_MAX} characters` }],
        });
      }
      // A header sent twice reaches here as its values joined by commas: which one to honour cannot be told.
      if (header?.includes(",")) {
        throw apiError("VALIDATION_ERROR", "Idempotency-Key carries more than one value (was the header sent twice?); send one key, without commas", {
          fieldViolations: [{ field: "Idempotency-Key", description: "must be one value, without commas" }],
        });
      }
      // A key is the caller's own among the keys of its kind: the publishable key is public (it ships in browser
      // code), and what it claims must never be what the account's backend gets answered for its secret key's call.
      const idempotencyKey = header === undefined ? undefined : `${keyKind}:${header}`;
      // The request as evaluated and stored, its address resolved.
      const requestJson = toJson(DecideRequestSchema, resolved);
      if (idempotencyKey !== undefined) {
        // Hashed as evaluated: a retry from another address is another request, not a replay.
        requestHash = sha256Hex(canonicalJson(requestJson));
        const earlier = deps.idempotency.find(tenant, idempotencyKey, now);
        if (earlier) return replay(earlier.requestHash, requestHash, earlier.response);
      }

      const input = engineInput(request, ip);
      // Card and bank-account identifiers from metadata join the fraud graph (docs/feedback.md).
      const entities = { ...entitiesOf(input), ...metadataIdentifiers(request.metadata) };
      const weights = deps.weights.current(tenant);
      const policies = deps.policies.forTenant(tenant, now);
      const denylisted = onDenyList(policies, entities);
      // Counted in flight until it is stored: the decides sent with it see it in their velocity and users.
      const decisionId = newId("dec");
      context.decisionId = decisionId;
      // The entities' keys in the store, once: the in-flight count, the engine's reads and the writer use them.
      const keys = entityKeysByKind(entities);
      const admitted = deps.inFlight.admit({ tenant, keys, userId: entities.userId, decisionId, idempotencyKey });
      const task = { tenant, input, entities, keys, nowMs: now, weights, denylisted, inFlight: admitted.counts };
      try {
        const { outcome, comprehensiveInTime, late } = await deps.engine.decide(task);
        const { result, signals } = outcome;
        const evaluation = deps.policies.evaluate(policies, policyInputs(request, ip, result.score, signals));
        const policyResults = [...evaluation.results, ...evaluation.shadowResults];
        const ruleErrors = policyResults.reduce((sum, r) => sum + r.errors.length, 0);
        if (ruleErrors > 0) deps.metrics.increment("fraud_policy_rule_errors_total", "Policy rules that failed at evaluation time.", "evaluation", ruleErrors);
        const verdict = { decision: evaluation.decision, results: policyResults.map(resultRecord) };
        const reasons = decisionReasons(result.reasons, evaluation);

        const evidenceId = newId("evi");
        const processingTimeMs = round3(performance.now() - started);
        const response = create(DecideResponseSchema, {
          decision: verdict.decision,
          score: result.score,
          confidence: result.confidence,
          confidencePercent: result.confidencePercent,
          reasons,
          evidenceId,
          requestId,
          processingTimeMs,
        });
        const details: DecisionDetails = {
          request: requestJson,
          reasons,
          confidencePercent: result.confidencePercent,
          categoryScores: result.categoryScores,
          contributions: result.contributions,
          weightsVersion: result.weightsVersion,
          policyResults: verdict.results,
          signalCoverage: comprehensiveInTime ? "full" : "partial",
          fastPathMs: round3(outcome.fastPathMs),
          comprehensivePathMs: round3(outcome.comprehensivePathMs),
          processingTimeMs,
        };
        const stored: StoredDecision<DecisionDetails> = {
          id: decisionId,
          evidenceId,
          requestId,
          userId: request.userId,
          action: request.action,
          createdAt: now,
          decision: verdict.decision,
          score: result.score,
          confidence: result.confidence,
          details,
        };
        const evidence = {
          evidenceId,
          decisionId,
          accountId: tenant.accountId,
          environment: tenant.environment,
          requestId,
          createdAt: new Date(now).toISOString(),
          request: requestJson,
          signals,
          weightsVersion: result.weightsVersion,
          score: result.score,
          decision: verdict.decision,
          reasons,
        };
        const replayed = await deps.writer.record({
          tenant,
          actor,
          decision: stored,
          evidence,
          history: { ...entities, country: userLocationCountry(signals), ...lessonPayment(paymentOf(request)), allowed: verdict.decision === "allow" },
          keys,
          policy: policyEffects(policies, evaluation),
          openCase: caseForDecision({ ...stored, reasons }, evaluation.review),
          idempotency: idempotencyKey !== undefined ? { key: idempotencyKey, entry: { requestHash, response: toBinary(DecideResponseSchema, response) } } : undefined,
          now,
        });
        if (replayed) return replay(replayed.requestHash, requestHash, replayed.response);

        if (late) {
          // Both outcomes are recorded: the answer given, and what the comprehensive path said afterwards.
          void late.then((full) => {
            details.lateComprehensive = full
              ? { score: full.result.score, reasons: full.result.reasons, comprehensivePathMs: round3(full.comprehensivePathMs) }
              : { failed: true };
            deps.writer.updateDetails(tenant, decisionId, details);
          }).catch((error: unknown) => deps.logger.log("warn", "could not record the late comprehensive outcome", { decisionId, error: String(error) }));
        }
        return response;
      } finally {
        admitted.release();
      }
    },

    async analyze(request, ctx) {
      const started = performance.now();
      const { tenant, clientIp, context } = callOf(ctx);
      const now = deps.clock.now();
      const ip = request.ip || clientIp;
      const input = engineInput(request, ip);
      const entities = entitiesOf(input);
      const policies = deps.policies.forTenant(tenant, now);
      const outcome = await deps.engine.fast({
        tenant,
        input,
        entities,
        nowMs: now,
        weights: deps.weights.current(tenant),
        // A denylisted entity is a hard signal here as in decide: it never reads as low risk.
        denylisted: onDenyList(policies, entities),
        withSignals: policies.hasOwnActive,
      });
      const { score } = outcome;
      // The account's active policies decide here as in decide, over the fast path's signals (the store's
      // categories are unavailable); without one of its own, the built-in thresholds, that is the score.
      const evaluation = policies.hasOwnActive ? deps.policies.evaluateActive(policies, policyInputs(request, ip, score, signalsOf(outcome))) : undefined;
      const decision = evaluation?.decision ?? decideFromScore(score);
      const reasons = evaluation === undefined ? outcome.reasons : decisionReasons(outcome.reasons, evaluation);
      const fingerprint = deviceFingerprint(request.device, request.userAgent);
      // Keyed per account and environment: the same device has unrelated ids in test and live. A visitor id
      // sent back as the deviceId (the browser SDK fills deviceId from the visitor id it was given) is the
      // visitor's own id, kept: keyed again, it would be another id on every call.
      const visitorId = VISITOR_ID.test(request.deviceId)
        ? request.deviceId
        : `vis_${keyedId(tenant.accountId, `visitor:${tenant.environment}`, visitorKey(request.deviceId, request.device, fingerprint, ip))}`;
      const riskLevel = riskLevelFromScore(score);
      const decisionId = newId("dec");
      context.decisionId = decisionId;
      deps.analyzeState.put(tenant, `visitor:${visitorId}`, { lastDecisionId: decisionId, riskLevel, score, at: now }, now + ANALYZE_STATE_TTL_MS);
      return {
        decision,
        riskLevel,
        visitorId,
        deviceFingerprintId: `dfp_${keyedId(tenant.accountId, `fingerprint:${tenant.environment}`, fingerprint.canonical)}`,
        deviceHash: fingerprint.deviceHash,
        // The band says how risky; a rule of the account's own that challenged or denied says so too.
        hasElevatedRisk: hasElevatedRisk(riskLevel) || (evaluation !== undefined && decidedByOwnPolicy(evaluation) && decision !== "allow"),
        riskReasons: reasons.filter((reason) => reason !== "LOW_RISK"),
        signalCoverage: outcome.signalCoverage,
        processingTimeMs: round3(performance.now() - started),
        decisionId,
      };
    },

    getDecision(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      // The decide answer carries the evidence id, not the decision's: either finds the record.
      const stored = request.id.startsWith("evi_") ? deps.decisions.getByEvidence(tenant, request.id) : deps.decisions.get(tenant, request.id);
      const evidence = stored && deps.decisions.evidence(tenant, stored.evidenceId);
      if (!stored || !evidence) throw apiError("NOT_FOUND", `no decision ${request.id}`);
      const { signals } = JSON.parse(evidence.content) as { signals: JsonObject };
      return { decision: toDecisionRecord(stored, tenant, signals) };
    },
  };
}

function replay(storedHash: string, requestHash: string, response: Uint8Array) {
  if (storedHash !== requestHash) {
    throw apiError("CONFLICT", "this Idempotency-Key was already used with a different request (its body, or the client address it was resolved to)");
  }
  return fromBinary(DecideResponseSchema, response);
}

/** The signals of an analyze whose account's policies read them (asked for with FastTask.withSignals). */
function signalsOf(outcome: AnalyzeOutcome): Signals {
  if (!outcome.signals) throw new Error("the engine's outcome carries no signals for the account's policies to read");
  return outcome.signals;
}

function toDecisionRecord(stored: StoredDecision<DecisionDetails>, tenant: Tenant, signals: JsonObject): MessageInitShape<typeof DecisionRecordSchema> {
  const details = stored.details;
  return {
    id: stored.id,
    evidenceId: stored.evidenceId,
    requestId: stored.requestId,
    environment: tenant.environment,
    createdAt: timestampFromMs(stored.createdAt),
    request: fromJson(DecideRequestSchema, details.request),
    decision: stored.decision,
    score: stored.score,
    confidence: stored.confidence,
    reasons: details.reasons,
    signals,
    categoryScores: details.categoryScores,
    contributions: details.contributions,
    weightsVersion: details.weightsVersion,
    policyResults: details.policyResults,
    signalCoverage: details.signalCoverage,
    fastPathMs: details.fastPathMs,
    comprehensivePathMs: details.comprehensivePathMs,
  };
}
