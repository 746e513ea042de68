import { Worker } from "node:worker_threads";
import type { AuditActor } from "../audit/entry.js";
import type { NewCase } from "../store/cases.js";
import type { EntityKeys } from "../graph/entities.js";
import { systemClock, type Clock } from "../clock.js";
import type { Logger } from "../log.js";
import type { Outbox, OutboxEntry } from "../outbox/outbox.js";
import { decisionRow, type StoredDecision } from "../store/decisions.js";
import type { HistoryUpdate } from "../store/history.js";
import type { IdempotentResponse } from "../store/idempotency.js";
import type { PolicyTriggeredEventData, ShadowPolicyResult } from "../webhooks/events.js";
import type { Tenant } from "../store/tenant.js";
import type { FollowUpReport, StoredDecisionWrite, WriteReport } from "./decision-store.js";
import { followUpOf } from "./follow-up.js";
import type { DecisionDetails } from "./record.js";

/** What the account's policies asked for beyond the decision itself. */
export interface PolicyEffects {
  /** Rules that matched (active and shadow), for policy.triggered events. */
  triggered: Array<Omit<PolicyTriggeredEventData, "decisionId" | "requestId" | "userId" | "action" | "score">>;
  /** Shadow policies' results, for the decision event. */
  shadowResults: ShadowPolicyResult[];
  /** The active policy whose rule set the decision, when one did (the decision event's policyId). */
  decidedBy?: string | undefined;
}

/** A decide's state, as the decision service hands it over. */
export interface DecisionWrite {
  tenant: Tenant;
  /** The API key that asked for the decision (its id, never the key). */
  actor: AuditActor;
  decision: StoredDecision<DecisionDetails>;
  evidence: Record<string, unknown>;
  history: HistoryUpdate;
  /** The history's entities keyed as the store keys them, computed once by the decide. */
  keys: EntityKeys;
  idempotency?: { key: string; entry: IdempotentResponse } | undefined;
  /** The case the decision opens (score at or above 80, or a review rule), opened just after it. */
  openCase?: NewCase | undefined;
  policy: PolicyEffects;
  /** The request thread's clock at the decision: every stored time comes from it. */
  now: number;
}

/**
 * What the writer's thread receives for a write: its rows serialised here,
 * with the outbox tasks its effects queued (stored with the decision) and the
 * case's (stored with the case, in the follow-up).
 */
export function prepareWrite(write: DecisionWrite, outbox: OutboxEntry[], caseEvents: OutboxEntry[]): StoredDecisionWrite {
  const decision = decisionRow(write.decision, write.evidence);
  return {
    tenant: write.tenant,
    decision,
    history: write.history,
    entityKeys: write.keys,
    ...(write.idempotency && { idempotency: write.idempotency }),
    outbox,
    followUpJson: JSON.stringify(followUpOf(write, caseEvents, decision.evidence.integrityHash)),
    now: write.now,
  };
}

/**
 * A side effect of every decision (its events, anomaly detection). It runs on
 * the request thread just before the write is sent, where the event sinks
 * are; the outbox tasks it enqueues are collected and committed with the
 * decision. A case effect's tasks are committed with the case the decision
 * opens, after the answer (follow-up.ts).
 */
export type DecisionEffect = (write: DecisionWrite) => void;

export interface WriterWorkerData {
  dataDir: string;
  crashOnBatch: number | undefined;
}

/** Request thread → writer thread. */
export type WriterRequest =
  | { kind: "write"; batch: number; writes: StoredDecisionWrite[] }
  /** A stored decision's details replaced (its late comprehensive outcome). */
  | { kind: "details"; tenant: Tenant; decisionId: string; record: string }
  | { kind: "close" };
/** Writer thread → request thread. */
export type WriterReply =
  /** Open, with the follow-ups an earlier writer left now carried out. */
  | { kind: "ready"; recovered: number; queuedEvents: boolean }
  | ({ kind: "written"; batch: number } & WriteReport)
  /** The batches' follow-ups are done; `failed` of them were left to the outbox runner. */
  | ({ kind: "followed"; batches: number[] } & FollowUpReport)
  | { kind: "detailsFailed"; decisionId: string; message: string };

/**
 * Batches handed to the writer's thread at once. Two: while one is written the
 * next is already waiting in its queue, so the thread goes straight from one
 * commit to the next instead of idling while the request thread takes in the
 * answer and sends more (it was idle a third of the time with one).
 */
const BATCHES_IN_FLIGHT = 2;
/** How long a batch that stored nothing counts against the store's health (writeFailure). */
export const WRITE_FAILURE_HOLD_MS = 10_000;

/**
 * Writes per batch at most. Under a backlog the batch is one transaction, and
 * the request thread's own writes (outbox, analyze state) wait for SQLite's
 * write lock while it runs: a bound keeps that wait to milliseconds.
 */
const MAX_BATCH = 256;

interface Pending {
  write: StoredDecisionWrite;
  resolve(replayed: IdempotentResponse | undefined): void;
  reject(error: unknown): void;
}

/**
 * Stores each decide's state before its response, in a thread of its own.
 *
 * The writes were SQLite's largest cost on the request path (about a third of
 * the request thread's time: rows, indexes, the audit signature, the commit);
 * the writer's thread does them on another core, and the request thread
 * prepares what it stores (prepareWrite) so that it only stores. Every caller still waits for the commit
 * before answering, so nothing is answered that is not stored.
 *
 * Group commit: the writes of one event-loop turn go to the writer as one
 * batch, one transaction. While {@link BATCHES_IN_FLIGHT} batches are with the
 * writer the next writes wait and then go together, so under load batches grow
 * and each commit serves more decisions.
 */
export class DecisionWriter {
  private readonly effects: DecisionEffect[] = [];
  private readonly caseEffects: DecisionEffect[] = [];
  private worker!: Worker;
  /** Threads started so far (a new one replaces one that died). */
  private starts = 0;
  private ready!: Promise<void>;
  /** Settles when the current thread has exited. */
  private exited!: Promise<void>;
  /** Between a thread's start and its "ready" (which carries out the follow-ups an earlier one left). */
  private starting = true;
  /** Set when a thread died before it was ready: no other is started. */
  private broken: Error | undefined;
  private queue: Pending[] = [];
  private flushScheduled = false;
  /** Batches handed to the writer's thread and not yet answered, by number. */
  private readonly inFlight = new Map<number, Pending[]>();
  /** Batches answered whose follow-ups are not done yet. */
  private readonly following = new Set<number>();
  private nextBatch = 1;
  /** Why the last batch stored nothing, and when, until a batch stores a decision again (the health check's). */
  private lastFailure: { message: string; at: number } | undefined;
  private closing: Promise<void> | undefined;
  /** Callers of settled() and close() waiting until nothing is being written or followed up. */
  private idleWaiters: Array<() => void> = [];

  private readonly clock: Clock;
  /** Fault injection for tests: the first writer thread dies when it receives this batch. */
  private readonly crashOnBatch: number | undefined;

  constructor(
    private readonly dataDir: string,
    private readonly outbox: Outbox,
    private readonly logger: Logger,
    options: { clock?: Clock; crashOnBatch?: number } = {},
  ) {
    this.clock = options.clock ?? systemClock;
    this.crashOnBatch = options.crashOnBatch;
    this.start();
  }

  addEffect(effect: DecisionEffect): void {
    this.effects.push(effect);
  }

  /** An effect of the case a decision opens (its case.created event); runs only for those. */
  addCaseEffect(effect: DecisionEffect): void {
    this.caseEffects.push(effect);
  }

  /** Resolves when every write handed over is stored and followed up (tests, shutdown). */
  settled(): Promise<void> {
    return this.isIdle() ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Why decisions cannot be stored right now: the writer could not start, or
   * the last batch stored none of its decisions (a full disk). Undefined once
   * a batch stores one again, or WRITE_FAILURE_HOLD_MS after the failed
   * batch: a server that reports itself not ready gets no decides from its
   * balancer, so it must not wait for one to say it recovered; if it has
   * not, the next decides fail and say so again.
   */
  writeFailure(): string | undefined {
    if (this.broken) return this.broken.message;
    if (this.lastFailure === undefined) return undefined;
    // A clock stepped back since (an NTP step, a resumed VM) ends the hold too: it must never outlast it.
    const elapsed = this.clock.now() - this.lastFailure.at;
    return elapsed >= 0 && elapsed < WRITE_FAILURE_HOLD_MS ? this.lastFailure.message : undefined;
  }

  /** Resolves once the writer's thread has opened the database. */
  whenReady(): Promise<void> {
    return this.ready;
  }

  /**
   * Stores the decision; resolves once it is committed, with the earlier
   * answer instead when an idempotent retry won the race.
   */
  record(write: DecisionWrite): Promise<IdempotentResponse | undefined> {
    if (this.closing) return Promise.reject(new Error("the decision writer is closed"));
    if (this.broken) return Promise.reject(this.broken);
    const outbox = this.outbox.collect(() => {
      for (const effect of this.effects) effect(write);
    });
    const caseEvents = write.openCase
      ? this.outbox.collect(() => {
          for (const effect of this.caseEffects) effect(write);
        })
      : [];
    return new Promise((resolve, reject) => {
      this.queue.push({ write: prepareWrite(write, outbox, caseEvents), resolve, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => {
          this.flushScheduled = false;
          this.flush();
        });
      }
    });
  }

  /**
   * Replaces a stored decision's details (its late comprehensive outcome) on
   * the writer's thread, so that the request thread never waits for SQLite's
   * write lock. Call once the decision is stored; a failure is logged.
   */
  updateDetails(tenant: Tenant, decisionId: string, details: DecisionDetails): void {
    if (this.closing) {
      this.logger.log("warn", "the decision writer is closed; a late outcome is not recorded", { decisionId });
      return;
    }
    this.worker.postMessage({ kind: "details", tenant, decisionId, record: JSON.stringify(details) } satisfies WriterRequest);
  }

  /** Waits for the writes already handed over, then closes the writer's thread. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.settled();
      this.worker.postMessage({ kind: "close" } satisfies WriterRequest);
      await this.exited;
    })();
    return this.closing;
  }

  private start(): void {
    // Only the first thread is given the fault: the one started after it must work.
    const crashOnBatch = this.starts++ === 0 ? this.crashOnBatch : undefined;
    const worker = new Worker(new URL("./writer-worker-entry.mjs", import.meta.url), {
      workerData: { dataDir: this.dataDir, crashOnBatch } satisfies WriterWorkerData,
      // A batch's objects die with the batch: a small young generation keeps the thread's footprint down.
      resourceLimits: { maxYoungGenerationSizeMb: 8 },
    });
    this.worker = worker;
    this.starting = true;
    this.exited = new Promise((resolve) => worker.once("exit", () => resolve()));
    this.ready = new Promise((resolve, reject) => {
      worker.on("message", (reply: WriterReply) => {
        if (reply.kind === "ready") {
          if (reply.recovered > 0) this.logger.log("info", "carried out decision follow-ups left by an earlier writer", { count: reply.recovered });
          if (reply.queuedEvents) this.outbox.notify();
          this.starting = false;
          resolve();
          if (this.isIdle()) this.whenIdle();
        }
        else if (reply.kind === "written") this.settle(reply.batch, reply);
        else if (reply.kind === "followed") this.followed(reply.batches, reply);
        else if (reply.kind === "detailsFailed") {
          this.logger.log("warn", "could not record the late comprehensive outcome", { decisionId: reply.decisionId, error: reply.message });
        }
      });
      worker.once("error", (error) => {
        reject(error);
        this.logger.log("error", "the decision writer failed", { error: error.stack ?? error.message });
      });
      worker.once("exit", (code) => {
        // Whatever was being written may or may not have committed; its callers get an error, not a guess.
        // (The follow-ups it had not done are still tasks: the next writer, or the outbox runner, does them.)
        const lost = [...[...this.inFlight.values()].flat(), ...this.queue];
        this.inFlight.clear();
        this.following.clear();
        this.queue = [];
        const diedStarting = this.starting;
        this.starting = false;
        for (const pending of lost) pending.reject(new Error(`the decision writer stopped (exit code ${code})`));
        if (this.closing) {
          // Closing: nothing to restart; close() waits for this exit.
          this.whenIdle();
          return;
        }
        if (diedStarting) {
          // It could not even open the store: another thread would fail the same way, in a loop. Decides fail
          // with a clear error until the service is restarted.
          this.broken = new Error(`the decision writer could not start (exit code ${code})`);
          this.logger.log("error", "the decision writer could not start; decides fail until the service restarts", { code });
          return;
        }
        this.logger.log("error", "the decision writer stopped; starting a new one", { code });
        this.start();
      });
    });
    // Surfaced to whoever awaits whenReady(); a later failure is logged above.
    this.ready.catch(() => undefined);
  }

  /** Hands the queued writes over, as long as the writer has room for another batch. */
  private flush(): void {
    while (this.inFlight.size < BATCHES_IN_FLIGHT && this.queue.length > 0) {
      const pending = this.queue.splice(0, MAX_BATCH);
      const batch = this.nextBatch++;
      this.inFlight.set(batch, pending);
      this.worker.postMessage({ kind: "write", batch, writes: pending.map((p) => p.write) } satisfies WriterRequest);
    }
  }

  private settle(batch: number, { results, retriedAfter }: WriteReport): void {
    const written = this.inFlight.get(batch);
    if (!written) return;
    if (retriedAfter !== undefined) {
      this.logger.log("warn", "a batch of decisions failed in one transaction and was written again one by one", { batch, error: retriedAfter });
    }
    this.inFlight.delete(batch);
    this.following.add(batch);
    let queuedTasks = false;
    let failure: string | undefined;
    written.forEach((pending, index) => {
      const result = results[index];
      if (result?.kind === "stored") {
        queuedTasks ||= pending.write.outbox.length > 0;
        pending.resolve(undefined);
      } else if (result?.kind === "replayed") pending.resolve(result.response);
      else {
        const message = result?.message ?? "no result";
        failure ??= message;
        pending.reject(new Error(`could not store the decision: ${message}`));
      }
    });
    // A batch that stored anything shows the store takes writes; one that stored nothing, that it may not.
    if (failure === undefined || results.some((result) => result.kind !== "failed")) this.lastFailure = undefined;
    else this.lastFailure = { message: failure, at: this.clock.now() };
    if (queuedTasks) this.outbox.notify();
    this.flush();
  }

  private followed(batches: number[], { failed, queuedEvents, error, retriedAfter }: FollowUpReport): void {
    for (const batch of batches) this.following.delete(batch);
    if (queuedEvents) this.outbox.notify();
    if (retriedAfter !== undefined) {
      this.logger.log("warn", "decision follow-ups failed in one transaction and were carried out again account by account", { batches, error: retriedAfter });
    }
    if (failed > 0) {
      this.logger.log("warn", "decision follow-ups failed; the outbox runner retries them", { batches, failed, error });
    }
    if (this.isIdle()) this.whenIdle();
  }

  private isIdle(): boolean {
    return !this.starting && this.inFlight.size === 0 && this.following.size === 0 && this.queue.length === 0;
  }

  private whenIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
