import type { KeyObject } from "node:crypto";
import type { JsonValue } from "@bufbuild/protobuf";
import { apiError } from "../api/errors.js";
import type { AuditActor } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import { authenticBody } from "../audit/verify.js";
import { canonicalJson, sha256Hex } from "../canonical-json.js";
import type { Clock } from "../clock.js";
import { indicatorsOf } from "../consortium/indicators.js";
import { crossedEnvironment } from "../consortium/membership.js";
import { queueIndicators } from "../consortium/sharing.js";
import { followUpStateOf } from "../decisions/follow-up.js";
import { decisionSummary, type DecisionDetails, type StoredRequest } from "../decisions/record.js";
import { DEFAULT_WEIGHTS, categoriesJudged, paymentOf, publicIpText, scoreSignals, userLocationCountry, type Signals } from "../engine/index.js";
import type { EventPublisher } from "../events/publisher.js";
import { entitiesOfRequest, entityKeys, entityValueOfKind } from "../graph/entities.js";
import { newId } from "../ids.js";
import type { Outbox } from "../outbox/outbox.js";
import { MAX_LIST_ENTRIES, normalizeListEntry } from "../policies/index.js";
import type { SqliteAuditStore } from "../store/audit.js";
import type { ConsortiumRepository } from "../store/consortium.js";
import type { Db } from "../store/database.js";
import type { DecisionRepository, StoredDecision } from "../store/decisions.js";
import type { FeedbackRepository } from "../store/feedback.js";
import type { GraphRepository } from "../store/graph.js";
import { lessonPayment, type DecisionEntities, type HistoryRepository, type ProfileLesson } from "../store/history.js";
import type { ListRepository } from "../store/lists.js";
import type { Tenant } from "../store/tenant.js";
import type { WeightsRepository } from "../store/weights.js";
import type { ActualOutcome, Decision } from "../webhooks/events.js";
import { NOT_FRAUD_OUTCOMES, SURE_CONFIDENCE, adjustWeights, marksEntities, teachesProfile, totalShift, weightChanges } from "./learning.js";

/** Optimistic-locking attempts of the weight update (spec part 8). */
export const WEIGHT_UPDATE_ATTEMPTS = 3;

/**
 * How long after its decision a missing decision.made entry may still be on its way (a follow-up the outbox
 * runner carries out after a crash, FOLLOW_UP_GRACE_MS and its first retries); past it, the entry is missing.
 */
export const ENTRY_GRACE_MS = 5 * 60_000;

export interface FeedbackInput {
  decisionId: string;
  evidenceId: string;
  userId: string;
  actualOutcome: ActualOutcome;
  /** 0..1. */
  confidence: number;
  notes: string;
}

export interface FeedbackResult {
  feedbackId: string;
  decisionId: string;
  actualOutcome: ActualOutcome;
  weightsVersionBefore: number;
  weightsVersionAfter: number;
  adjustments: Record<string, number>;
  graphUpdated: boolean;
  consortiumShared: boolean;
  replacedPrevious: boolean;
}

export interface FeedbackDeps {
  db: Db;
  clock: Clock;
  decisions: DecisionRepository<DecisionDetails>;
  feedback: FeedbackRepository;
  weights: WeightsRepository;
  graph: GraphRepository;
  /** For a challenged or denied decision labelled legitimate: its device, country and payment join the user's profile. */
  history: HistoryRepository;
  lists: ListRepository;
  consortium: ConsortiumRepository;
  outbox: Outbox;
  events: EventPublisher;
  audit: AuditTrail;
  /** Where each decision's signed decision.made entry is read, and the key that verifies it. */
  auditEntries: Pick<SqliteAuditStore, "decisionEntry">;
  auditPublicKey: KeyObject;
  /** Called after a commit that added entries to automatic deny lists (PolicySets.invalidate). */
  listsChanged(tenant: Tenant): void;
}

/** The parts of the evidence record feedback relies on; all covered by its integrity hash. */
interface VerifiedEvidence {
  decisionId: string;
  request: JsonValue;
  signals: Signals;
  score: number;
  decision: string;
  reasons: JsonValue;
}

/** What one attempt's transaction committed. */
interface Committed {
  applied: FeedbackResult;
  /** Entries added to automatic deny lists. */
  listed: Array<{ list: string; value: string }>;
}

/** Thrown inside an attempt's transaction to roll it back and try again. */
class StaleRead extends Error {}

/**
 * The decision's signed audit entry is not written yet: it follows the answer
 * within milliseconds (decisions/follow-up.ts). The caller waits for the
 * decision writer and submits again; nothing was changed.
 */
export class DecisionEntryPending extends Error {}

/**
 * Applies ground truth to a past decision (docs/feedback.md): verifies the
 * evidence, moves the weights (first label of a decision only), relabels the
 * decision's entities in the fraud graph, feeds automatic deny lists, queues
 * consortium indicators, and publishes feedback.received — all in one
 * transaction per attempt, so a failed attempt leaves nothing behind.
 *
 * The weights are read outside the write transaction and written only if
 * their version is unchanged (optimistic locking): another process's update in
 * between makes the attempt start over, at most WEIGHT_UPDATE_ATTEMPTS times.
 */
export class FeedbackProcessor {
  private readonly write;

  constructor(private readonly deps: FeedbackDeps) {
    this.write = deps.db.transaction((work: () => Committed) => work());
  }

  /**
   * `waitedForEntry`: the caller has let the decision writer carry out what it holds since a first attempt
   * found no audit entry for the decision; a missing entry is then judged by the decision's age.
   */
  submit(tenant: Tenant, actor: AuditActor, input: FeedbackInput, { waitedForEntry = false } = {}): FeedbackResult {
    const decision = this.findDecision(tenant, input);
    const evidence = this.verifiedEvidence(tenant, actor, decision, waitedForEntry);
    const entities = entitiesOfRequest(evidence.request);
    // Category risks are recomputed from the verified signals: they do not depend on the weights.
    const categoryScores = scoreSignals(evidence.signals, DEFAULT_WEIGHTS).categoryScores;
    // Only the categories that had data for the decision learn from its label: one that measured nothing called nothing.
    const judged = categoriesJudged(evidence.signals);
    // Entities are marked only by a fraud label the client is at least half sure of: an unsure one (confidence
    // below SURE_CONFIDENCE) moves the weights in proportion, and marks nobody, in the graph, the automatic
    // deny lists or the consortium.
    const marks = marksEntities(input);

    for (let attempt = 1; attempt <= WEIGHT_UPDATE_ATTEMPTS; attempt++) {
      const { feedback, weights } = this.deps;
      const current = weights.current(tenant);
      const previous = feedback.latestFor(tenant, decision.id);
      // A decision moves the weights once: a later label replaces the earlier one everywhere else. A label
      // that moved nothing (confidence 0) leaves that move to the next one.
      const next = previous && feedback.movedWeights(tenant, decision.id) ? current.weights : adjustWeights(current.weights, categoryScores, judged, input.actualOutcome, input.confidence);
      const moves = totalShift(current.weights, next) > 0;
      try {
        const { applied, listed } = this.write.immediate((): Committed => {
          const now = this.deps.clock.now();
          if (feedback.latestFor(tenant, decision.id)?.id !== previous?.id) throw new StaleRead();
          if (moves && !weights.replace(tenant, current.version, next, now)) throw new StaleRead();
          // By the latest label that was sure either way: an unsure one between two sure fraud labels says
          // nothing new, and must not let the second add to the lists and share again.
          const lastSure = previous && feedback.latestFor(tenant, decision.id, SURE_CONFIDENCE);
          const markedBefore = lastSure !== undefined && marksEntities(lastSure);
          const applied: FeedbackResult = {
            feedbackId: newId("fb"),
            decisionId: decision.id,
            actualOutcome: input.actualOutcome,
            weightsVersionBefore: current.version,
            weightsVersionAfter: moves ? current.version + 1 : current.version,
            adjustments: weightChanges(current.weights, next),
            graphUpdated: this.deps.graph.label(tenant, decision.id, entityKeys(entities), marks),
            consortiumShared: marks && !markedBefore && this.share(tenant, entities),
            replacedPrevious: previous !== undefined,
          };
          // As with the consortium, a fraud label after a fraud label adds nothing again: an entry a person
          // removed since stays removed.
          const listed = marks && !markedBefore ? this.addToAutomaticLists(tenant, entities, now) : [];
          // Only allowed decisions teach the user's profile as they are made (store/history.ts). One the user
          // proves legitimate afterwards (a challenge passed) teaches it now: once, whatever labels came between.
          // A later fraud label does not take the lesson back: the profile keeps no record of what taught it. So,
          // as for marking entities, only a label the client is at least half sure of teaches: a "maybe
          // legitimate" would make a device or country the user's for good.
          if (
            teachesProfile(input) &&
            decision.decision !== "allow" &&
            !feedback.everLabelled(tenant, decision.id, NOT_FRAUD_OUTCOMES, SURE_CONFIDENCE)
          ) {
            this.deps.history.learn(tenant, lessonOf(decision.userId, entities, evidence), decision.createdAt);
          }
          feedback.insert(tenant, {
            id: applied.feedbackId,
            decisionId: decision.id,
            actualOutcome: input.actualOutcome,
            confidence: input.confidence,
            notes: input.notes,
            weightsVersionBefore: applied.weightsVersionBefore,
            weightsVersionAfter: applied.weightsVersionAfter,
            adjustments: applied.adjustments,
            createdAt: now,
          });
          this.deps.events.publish(tenant, "feedback.received", {
            feedbackId: applied.feedbackId,
            decisionId: decision.id,
            userId: decision.userId,
            actualOutcome: input.actualOutcome,
            confidence: input.confidence,
            decision: decision.decision as Decision,
            score: decision.score,
          });
          this.deps.audit.record({
            ...tenant,
            actor,
            action: "feedback.received",
            subject: applied.feedbackId,
            data: {
              decisionId: decision.id,
              actualOutcome: input.actualOutcome,
              confidence: input.confidence,
              replacedPrevious: applied.replacedPrevious,
              weightsVersionBefore: applied.weightsVersionBefore,
              weightsVersionAfter: applied.weightsVersionAfter,
              adjustments: applied.adjustments,
              listEntriesAdded: listed,
            },
          });
          return { applied, listed };
        });
        if (listed.length > 0) this.deps.listsChanged(tenant);
        return applied;
      } catch (error) {
        if (!(error instanceof StaleRead)) throw error;
      }
    }
    throw apiError(
      "CONFLICT",
      `the account's weights changed during each of ${WEIGHT_UPDATE_ATTEMPTS} attempts to apply this feedback; nothing was stored, retry`,
      { retryAfterSeconds: 1 },
    );
  }

  /**
   * decisionId, else evidenceId, else the user's most recent decision; any
   * other identifier given must name the same decision.
   */
  private findDecision(tenant: Tenant, input: FeedbackInput): StoredDecision<DecisionDetails> {
    const { decisions } = this.deps;
    let decision: StoredDecision<DecisionDetails> | undefined;
    let by: string;
    if (input.decisionId) {
      decision = decisions.get(tenant, input.decisionId);
      by = `decision ${input.decisionId}`;
    } else if (input.evidenceId) {
      decision = decisions.getByEvidence(tenant, input.evidenceId);
      by = `decision with evidence ${input.evidenceId}`;
    } else {
      decision = decisions.latestForUser(tenant, input.userId);
      by = `decision for user ${JSON.stringify(input.userId)}`;
    }
    if (!decision) throw apiError("NOT_FOUND", `no ${by} in this account and environment`);
    const mismatches: Array<{ field: string; description: string }> = [];
    if (input.evidenceId && input.evidenceId !== decision.evidenceId) {
      mismatches.push({ field: "evidenceId", description: `is not the evidence of ${decision.id}` });
    }
    if (input.userId && input.userId !== decision.userId) {
      mismatches.push({ field: "userId", description: `is not the user of ${decision.id}` });
    }
    if (mismatches.length > 0) {
      throw apiError("VALIDATION_ERROR", `the identifiers name different decisions: ${mismatches.map((m) => `${m.field} ${m.description}`).join("; ")}`, {
        fieldViolations: mismatches,
      });
    }
    return decision;
  }

  /**
   * The decision's evidence, refused (and the refusal audited) unless its
   * content still hashes to the integrity hash stored with it, that hash is
   * the one the decision's signed audit entry recorded, and the evidence
   * agrees with the decision row on the decision, score, user and identity.
   * The hash beside the content alone proves nothing to someone who can
   * rewrite both; the signed entry needs the installation's audit key.
   */
  private verifiedEvidence(tenant: Tenant, actor: AuditActor, decision: StoredDecision<DecisionDetails>, waitedForEntry: boolean): VerifiedEvidence {
    const stored = this.deps.decisions.evidence(tenant, decision.evidenceId);
    let problem: string | undefined;
    let evidence: VerifiedEvidence | undefined;
    if (!stored) problem = "the evidence record is missing";
    else if (sha256Hex(stored.content) !== stored.integrityHash) problem = "the evidence content does not match its integrity hash";
    else if ((problem = this.anchorProblem(tenant, decision, stored.integrityHash, waitedForEntry)) === undefined) {
      evidence = JSON.parse(stored.content) as VerifiedEvidence;
      const user = (evidence.request as StoredRequest | null)?.userId ?? "";
      if (
        evidence.decisionId !== decision.id ||
        evidence.score !== decision.score ||
        evidence.decision !== decision.decision ||
        user !== decision.userId ||
        // What the record shows of the request and the reasons is what the evidence holds, as it was evaluated.
        canonicalJson(evidence.request) !== canonicalJson(decision.details.request) ||
        canonicalJson(evidence.reasons) !== canonicalJson(decision.details.reasons)
      ) {
        problem = "the decision record disagrees with its evidence";
      }
    }
    if (problem !== undefined || evidence === undefined) {
      this.deps.audit.atomically(() =>
        this.deps.audit.record({
          ...tenant,
          actor,
          action: "evidence.tampered",
          subject: decision.id,
          data: { evidenceId: decision.evidenceId, problem: problem ?? "unreadable evidence" },
        }),
      );
      throw apiError("EVIDENCE_TAMPERED", `feedback refused: ${problem ?? "unreadable evidence"} (decision ${decision.id}); the refusal is in the audit log`);
    }
    return evidence;
  }

  /**
   * Why the decision's signed audit entry does not vouch for this integrity hash (and this tenant);
   * undefined when it does. Throws DecisionEntryPending while the entry may still be on its way.
   */
  private anchorProblem(tenant: Tenant, decision: StoredDecision<DecisionDetails>, integrityHash: string, waitedForEntry: boolean): string | undefined {
    const entry = this.deps.auditEntries.decisionEntry(decision.id);
    if (!entry) {
      // It follows the decision within milliseconds, or within seconds of a restart after a crash; long after,
      // it was deleted (or its follow-up failed for good, which the dead letters show).
      const soon = `decision ${decision.id} has no signed audit entry yet: it follows the decision within seconds; submit the feedback again shortly`;
      if (!waitedForEntry || this.deps.clock.now() - decision.createdAt < ENTRY_GRACE_MS) throw new DecisionEntryPending(soon);
      // An old decision's follow-up may still be on its way (a restart after a crash runs it), or failed for good.
      const followUp = followUpStateOf(this.deps.outbox.table, tenant, decision.id);
      if (followUp === "pending") throw new DecisionEntryPending(soon);
      if (followUp === "dead") {
        throw new DecisionEntryPending(`decision ${decision.id} has no signed audit entry: its follow-up failed and waits in the dead-letter queue; replay it, then submit the feedback again`);
      }
      return "the decision's signed audit entry is missing";
    }
    const body = authenticBody(entry, this.deps.auditPublicKey);
    if (!body) return "the decision's audit entry is not authentic (its content, hash or signature was altered)";
    // A decision moved into another tenant's rows still has its own tenant's signed entry.
    if (body.accountId !== tenant.accountId || body.environment !== tenant.environment) return "the decision's signed audit entry belongs to another account or environment";
    const data = typeof body.data === "object" && body.data !== null && !Array.isArray(body.data) ? (body.data as Record<string, unknown>) : {};
    // Entries written before the hash was recorded in them vouch for nothing more than the row's own hash.
    const recorded = data.evidenceIntegrityHash;
    if (recorded !== undefined && recorded !== integrityHash) return "the evidence is not the one the decision's signed audit entry recorded";
    // The entry signed the decision's summary too: the row's confidence, which no evidence holds, among it.
    for (const [field, value] of Object.entries(decisionSummary(decision))) {
      if (field in data && canonicalJson(data[field]) !== canonicalJson(value)) return `the decision record disagrees with its signed audit entry on ${field}`;
    }
    return undefined;
  }

  /** Queues the decision's indicators when the account shares with a consortium; true when queued. */
  private share(tenant: Tenant, entities: DecisionEntities): boolean {
    const settings = this.deps.consortium.settings(tenant);
    // A membership saved before tokens were checked against the environment shares nothing.
    if (!settings || settings.shareUrl === "" || crossedEnvironment(settings.shareToken, tenant.environment)) return false;
    const indicators = indicatorsOf(entities, settings.key);
    if (indicators.length === 0) return false;
    queueIndicators(this.deps.outbox, tenant, indicators, settings.key);
    return true;
  }

  /** Adds the decision's entities to the account's automatic deny lists of their kind; the entries added. */
  private addToAutomaticLists(tenant: Tenant, entities: DecisionEntities, now: number): Array<{ list: string; value: string }> {
    const added: Array<{ list: string; value: string }> = [];
    // A private address (the backend's own, when decides leave `ip` out) would deny everyone behind it.
    const linkable: DecisionEntities = { ...entities, ip: publicIpText(entities.ip) };
    for (const list of this.deps.lists.list(tenant, now)) {
      if (!list.automatic || list.type !== "deny") continue;
      const value = normalizeListEntry(list.kind, entityValueOfKind(linkable, list.kind));
      if (value === null) continue;
      // A full list takes no more (the label's other effects still apply): it holds what people review.
      if (list.entryCount >= MAX_LIST_ENTRIES) continue;
      // An entry there already keeps the expiry a person gave it.
      if (this.deps.lists.addEntryUnlessLive(tenant, list.name, { value, expiresAt: undefined }, now)) {
        this.deps.lists.touch(tenant, list.name, now);
        added.push({ list: list.name, value });
      }
    }
    return added;
  }
}

/** What a decision's verified evidence teaches the user's profile: its device, the country its IP locates the user in, and its payment. */
function lessonOf(userId: string, entities: DecisionEntities, evidence: VerifiedEvidence): ProfileLesson {
  // The decide's own protobuf JSON, its integrity verified above.
  const request = evidence.request as StoredRequest;
  const payment = paymentOf({ action: request.action ?? "", amount: request.amount, currency: request.currency });
  return { userId, deviceId: entities.deviceId, country: userLocationCountry(evidence.signals), ...lessonPayment(payment) };
}
