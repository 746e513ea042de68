import type { AddressInfo } from "node:net";
import { createConnectRouter, createServiceImplSpec, type ServiceImpl, type ServiceImplSpec } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { CaseService as CaseRpc } from "../../gen/fraud/v1/case_pb.js";
import { DecisionService } from "../../gen/fraud/v1/decision_pb.js";
import { FeedbackService } from "../../gen/fraud/v1/feedback_pb.js";
import { ConsortiumService } from "../../gen/fraud/v1/consortium_pb.js";
import { PolicyService } from "../../gen/fraud/v1/policy_pb.js";
import { StatusService } from "../../gen/fraud/v1/status_pb.js";
import { WebhookService } from "../../gen/fraud/v1/webhook_pb.js";
import { AuditService } from "../../gen/fraud/v1/audit_pb.js";
import { DeadLetterService } from "../../gen/fraud/v1/dead_letter_pb.js";
import { Health } from "../../gen/health/v1/health_pb.js";
import { file_fraud_v1_value_sets } from "../../gen/fraud/v1/value_sets_pb.js";
import { file_fraud_v1_errors } from "../../gen/fraud/v1/errors_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1Alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { API_SERVICES, JSON_WRITE_OPTIONS } from "../api/contract.js";
import { admitCaller, apiInterceptors } from "../api/interceptors.js";
import { RunningCalls } from "../api/running-calls.js";
import { UnaryInvoker } from "../api/unary-invoker.js";
import { GrpcUnaryPath } from "./grpc-unary.js";
import { RateLimiter } from "../api/rate-limiter.js";
import { KeyService } from "../auth/key-service.js";
import { AuditLog } from "../audit/log.js";
import { AuditSigner } from "../audit/signer.js";
import { SqliteAuditStore } from "../store/audit.js";
import { WebhookRepository } from "../store/webhooks.js";
import { registerAnomalyDetection } from "../webhooks/anomaly.js";
import { WebhookEndpoints } from "../webhooks/endpoints.js";
import { registerHttpDelivery } from "../webhooks/http-delivery.js";
import { EventStream } from "../webhooks/stream.js";
import { createAuditService } from "../services/audit.js";
import { createDeadLetterService } from "../services/dead-letters.js";
import { createWebhookService } from "../services/webhooks.js";
import { systemClock, type Clock } from "../clock.js";
import type { Config } from "../config.js";
import { createLogger, type Logger } from "../log.js";
import { HealthMonitor } from "../observability/health.js";
import { Metrics } from "../observability/metrics.js";
import { registerHealth } from "../services/health.js";
import { createFeedbackService } from "../services/feedback.js";
import { createConsortiumService } from "../services/consortium.js";
import { FeedbackProcessor } from "../feedback/processor.js";
import { removeNonPublicAutomaticEntries } from "../feedback/repair.js";
import { rekeyStoredEntities } from "../graph/rekey.js";
import { registerConsortiumSharing } from "../consortium/sharing.js";
import { ConsortiumRepository } from "../store/consortium.js";
import { FeedbackRepository } from "../store/feedback.js";
import { GraphRepository } from "../store/graph.js";
import { registerReflection } from "../services/reflection.js";
import { createStatusService } from "../services/status.js";
import { createDecisionService } from "../services/decisions.js";
import { createListService } from "../services/lists.js";
import { createPolicyService } from "../services/policies.js";
import { PolicySets } from "../decisions/policy-set.js";
import { ListRepository } from "../store/lists.js";
import { PolicyRepository } from "../store/policies.js";
import { ListService } from "../../gen/fraud/v1/list_pb.js";
import { createCaseService } from "../services/cases.js";
import { CaseService } from "../cases/case-service.js";
import { registerDecisionSideEffects } from "../decisions/side-effects.js";
import { EventPublisher } from "../events/publisher.js";
import { Outbox } from "../outbox/outbox.js";
import { Checkpointer } from "../store/checkpointer.js";
import { CaseRepository } from "../store/cases.js";
import { DecisionEngine } from "../decisions/engine.js";
import type { DecisionDetails } from "../decisions/record.js";
import { DecisionFollowUps, registerFollowUpTask } from "../decisions/follow-up.js";
import { DecisionWriter } from "../decisions/writer.js";
import { AnalyzeStateRepository } from "../store/analyze-state.js";
import { DecisionRepository } from "../store/decisions.js";
import { IdempotencyRepository } from "../store/idempotency.js";
import { WeightsRepository } from "../store/weights.js";
import { AccountRepository } from "../store/accounts.js";
import { ApiKeyRepository } from "../store/api-keys.js";
import { openDatabase, type Db } from "../store/database.js";
import { DataDirectoryLock } from "../store/data-dir-lock.js";
import { ClientIpResolver } from "./client-ip.js";
import { Dispatcher } from "./dispatcher.js";
import { RestGateway } from "./gateway.js";
import { DualProtocolListener, type ConnectionTimeouts } from "./listener.js";
import { Maintenance } from "./maintenance.js";
import { strictUtf8 } from "./request-body.js";
import { HistoryRepository } from "../store/history.js";
import { DecisionsInFlight } from "../decisions/in-flight.js";

/** On shutdown the outbox flushes what is due for what is left of the grace period, and at least this long. */
const MIN_OUTBOX_FLUSH_MS = 1_000;

export interface AppOptions {
  config: Config;
  clock?: Clock;
  logger?: Logger;
  /** Fault injection for tests: extra latency before every store read of the comprehensive path. */
  storeLatencyMs?: number;
  /** For tests: how often event-stream connections are pinged (stream.ts HEARTBEAT_MS otherwise). */
  streamHeartbeatMs?: number;
  /** For tests: how long a client may take to send a request (listener.ts's defaults otherwise). */
  connectionTimeouts?: ConnectionTimeouts;
}

/** A built, not yet listening, service. Tests build one on port 0. */
export interface App {
  readonly config: Config;
  readonly db: Db;
  readonly keys: KeyService;
  readonly accounts: AccountRepository;
  readonly metrics: Metrics;
  readonly logger: Logger;
  readonly outbox: Outbox;
  /** Readiness, as /api/health, the gRPC health service and the status report see it. */
  readonly health: HealthMonitor;
  readonly events: EventPublisher;
  /** The signed audit log: `audit.record(...)` inside the transaction of the change it records (docs/audit-log.md). */
  readonly audit: AuditLog;
  listen(): Promise<AddressInfo>;
  /**
   * Resolves once every decision handed to the writer is stored and followed
   * up (audit entry, case) and the outbox has carried out every task already
   * due: what follows the answers, done (tests wait for it).
   */
  settled(): Promise<void>;
  /** Drains in-flight requests, flushes pending work and closes the database. */
  close(): Promise<void>;
}

/**
 * The service over its data directory, which it holds alone until closed
 * (DataDirectoryLock): a second one refuses to start, naming the first.
 */
export function buildApp(options: AppOptions): App {
  const logger = options.logger ?? createLogger();
  const started = new StartedParts();
  // The first part taken, so the last given back: the directory is held until its database is closed.
  const lock = started.add("data directory lock", DataDirectoryLock.acquire(options.config.dataDir), (part) => part.release());
  try {
    return assembleApp({ ...options, logger }, lock, started);
  } catch (error) {
    // A start that fails part way (a repair's write on a full disk, a damaged schema) leaves nothing running: the
    // threads already started would keep the process up.
    void started.stopAll(logger);
    throw error;
  }
}

/** What a start has set running so far, to be stopped, newest first, if the start fails after them. */
class StartedParts {
  private readonly stops: Array<{ name: string; stop: () => unknown }> = [];

  add<T>(name: string, part: T, stop: (part: T) => unknown): T {
    this.stops.push({ name, stop: () => stop(part) });
    return part;
  }

  async stopAll(logger: Logger): Promise<void> {
    for (const { name, stop } of this.stops.reverse()) {
      try {
        await stop();
      } catch (error) {
        logger.log("error", "stopping after a failed start failed", { part: name, error: error instanceof Error ? error.message : String(error) });
      }
    }
  }
}

function assembleApp(options: AppOptions & { logger: Logger }, lock: DataDirectoryLock, started: StartedParts): App {
  const { config, logger } = options;
  const clock = options.clock ?? systemClock;
  const db = started.add("database", openDatabase(config.dataDir), (database) => database.close());
  const accounts = new AccountRepository(db);
  const auditStore = new SqliteAuditStore(db);
  const auditSigner = AuditSigner.forLog(config.dataDir, auditStore.isEmpty());
  const audit = new AuditLog(auditStore, auditSigner, clock);
  const keys = new KeyService(accounts, new ApiKeyRepository(db), clock, audit, "system");
  const metrics = new Metrics();
  const health = new HealthMonitor(db);
  const limiter = new RateLimiter(clock);
  const engine = started.add("engine", DecisionEngine.start({
    dataDir: config.dataDir,
    reference: {
      torExitListPath: config.torExitListPath,
      datacenterRangesPath: config.datacenterRangesPath,
      snapshotDir: config.referenceSnapshotDir,
    },
    logger,
    threads: config.engineThreads,
    comprehensiveBudgetMs: config.comprehensiveBudgetMs,
    queueLimit: config.engineQueueLimit,
    storeLatencyMs: options.storeLatencyMs,
  }), (part) => part.close());
  const decisions = new DecisionRepository<DecisionDetails>(db);
  const idempotency = new IdempotencyRepository(db);
  const analyzeState = new AnalyzeStateRepository(db, logger);
  const checkpointer = started.add("checkpointer", new Checkpointer(db, config.dataDir, logger), (part) => part.stop());
  const policyRepository = new PolicyRepository(db);
  const listRepository = new ListRepository(db);
  removeNonPublicAutomaticEntries({ db, lists: listRepository, auditEntries: auditStore, audit, clock, logger });
  rekeyStoredEntities({ db, lists: listRepository, audit, clock, logger });
  const policySets = new PolicySets(policyRepository, listRepository, (skipped) => {
    logger.log("warn", "a stored policy no longer compiles: decisions skip it until it is saved again", {
      account: skipped.tenant.accountId,
      environment: skipped.tenant.environment,
      policyId: skipped.policyId,
      version: skipped.version,
      name: skipped.name,
      errors: skipped.errors,
    });
    metrics.increment("fraud_policies_skipped_total", "Stored policies left out of a tenant's set because they no longer compile.", "compile");
  });
  const outbox = new Outbox(db, clock, logger);
  const writer = started.add("decision writer", new DecisionWriter(config.dataDir, outbox, logger, { clock }), (part) => part.close());
  health.addBacklog(() => outbox.pending());
  health.addWriteCheck(() => writer.writeFailure());
  const events = new EventPublisher(outbox, clock);
  const cases = new CaseRepository(db);
  const caseLifecycle = new CaseService(db, cases, events, clock, audit);
  registerDecisionSideEffects(writer, events);
  // Follow-ups the writer could not carry out (its thread died) are the outbox runner's.
  registerFollowUpTask(outbox, new DecisionFollowUps(db, auditStore, audit, outbox.table));
  registerAnomalyDetection(writer, events);
  const graph = new GraphRepository(db);
  const webhookRepository = new WebhookRepository(db);
  const webhookGuard = { allowPrivate: config.webhookAllowPrivate };
  const webhookEndpoints = new WebhookEndpoints(db, webhookRepository, audit, clock, webhookGuard);
  registerHttpDelivery({
    db,
    repository: webhookRepository,
    endpoints: webhookEndpoints,
    outbox,
    events,
    clock,
    logger,
    guard: webhookGuard,
    random: Math.random,
  });
  const consortium = new ConsortiumRepository(db);
  registerConsortiumSharing({ outbox, consortium, clock, guard: webhookGuard });
  const weights = new WeightsRepository(db);
  const history = new HistoryRepository(db);
  const feedback = new FeedbackProcessor({
    db,
    clock,
    decisions,
    feedback: new FeedbackRepository(db),
    weights,
    graph,
    history,
    lists: listRepository,
    consortium,
    outbox,
    events,
    audit,
    auditEntries: auditStore,
    auditPublicKey: auditSigner.publicKey,
    listsChanged: (tenant) => policySets.invalidate(tenant),
  });
  const eventStream = new EventStream(keys, webhookRepository, events, clock, logger, options.streamHeartbeatMs);

  const calls = new RunningCalls();
  const interceptors = apiInterceptors({ logger, keys, limiter, rateLimitOverrides: config.rateLimitOverrides, calls });
  // Zero values and empty lists stay in JSON: REST clients read the exact shapes of the specification. Unknown
  // fields are refused, as the REST gateway refuses them (connect-es would drop them): a typo such as `ammount`
  // must not produce a decision without its amount on any protocol. Malformed UTF-8 is refused, as REST refuses
  // it: connect-es hands these options to its JSON serialization, which takes a decoder its router's type does
  // not name (test/protocols.test.ts checks it is used).
  const jsonOptions: typeof JSON_WRITE_OPTIONS & { ignoreUnknownFields: boolean; textDecoder: typeof strictUtf8 } = {
    ...JSON_WRITE_OPTIONS,
    ignoreUnknownFields: false,
    textDecoder: strictUtf8,
  };
  // gzip and brotli, as gRPC and Connect clients configured to compress send them (grpc-go's UseCompressor,
  // grpc-js's default_compression_algorithm): decompressed into at most readMaxBytes, so a small bomb is refused
  // as a message over the limit. The unary gRPC path hands compressed calls to the router. Answers go
  // uncompressed: the library's refusals are read and rewritten (library-refusal.ts), and answers are small.
  const router = createConnectRouter({
    interceptors,
    jsonOptions,
    readMaxBytes: config.maxBodyBytes,
    acceptCompression: [compressionGzip, compressionBrotli],
    compressMinBytes: Number.POSITIVE_INFINITY,
  });
  // Each service is served by the router (Connect, gRPC, gRPC-Web) and by the REST gateway, from one implementation.
  const services: ServiceImplSpec[] = [];
  const serve = <T extends DescService>(service: T, implementation: ServiceImpl<T>): void => {
    router.service(service, implementation);
    services.push(createServiceImplSpec(service, implementation));
  };
  serve(
    DecisionService,
    createDecisionService({
      clock,
      logger,
      engine,
      writer,
      decisions,
      idempotency,
      weights,
      accounts,
      analyzeState,
      policies: policySets,
      metrics,
      inFlight: new DecisionsInFlight(),
    }),
  );
  serve(FeedbackService, createFeedbackService({ processor: feedback, writerSettled: () => writer.settled() }));
  serve(ConsortiumService, createConsortiumService({ consortium, clock }));
  serve(CaseRpc, createCaseService({ cases, lifecycle: caseLifecycle }));
  serve(PolicyService, createPolicyService({ db, clock, policies: policyRepository, sets: policySets, engine, audit }));
  serve(ListService, createListService({ db, clock, lists: listRepository, sets: policySets, audit }));
  serve(WebhookService, createWebhookService({ endpoints: webhookEndpoints, clock, stream: eventStream }));
  serve(DeadLetterService, createDeadLetterService({ outbox }));
  serve(AuditService, createAuditService({ store: auditStore }));
  serve(StatusService, createStatusService({ metrics, health, clock }));
  // Every service the port serves, as reflection lists it: the health service answers for each of them.
  const served = [...API_SERVICES, Health, ServerReflection, ServerReflectionV1Alpha];
  registerHealth(router, health, served);
  // The value sets are referenced by name from field options, and ErrorDetail travels only in error details
  // (grpc-status-details-bin), not in any method's messages: serve both files explicitly, so that grpcurl and
  // buf curl can decode a failure's detail.
  registerReflection(router, served, [file_fraud_v1_value_sets, file_fraud_v1_errors]);

  const invoker = new UnaryInvoker(services, interceptors);
  const gateway = new RestGateway(invoker, { maxBodyBytes: config.maxBodyBytes, jsonOptions: JSON_WRITE_OPTIONS });
  const grpcUnary = new GrpcUnaryPath(invoker, { readMaxBytes: config.maxBodyBytes });
  const dispatcher = new Dispatcher(router, gateway, grpcUnary, {
    // Every API call's caller is let through, or refused, before its body is read (interceptors.ts).
    admit: (contract, headers, context) => admitCaller(keys, contract, headers, context),
    maxBodyBytes: config.maxBodyBytes,
    clientIp: new ClientIpResolver(config.trustedProxies),
    metrics,
    health,
    logger,
    gauges: () => {
      const { ready, backlog } = health.report();
      return {
        fraud_background_backlog: { help: "Pending background tasks (-1 when they cannot be counted).", value: backlog ?? -1 },
        fraud_ready: { help: "1 when the server is ready: its database works and it is not shutting down.", value: ready ? 1 : 0 },
        fraud_engine_queue: { help: "Decides and analyzes waiting for or in the engine (503 at FRAUD_ENGINE_QUEUE_LIMIT); a decide's fast fallback counts with it.", value: engine.unanswered() },
      };
    },
  });
  const listener = new DualProtocolListener(dispatcher.listener, options.connectionTimeouts);
  listener.onUpgrade(dispatcher.observedUpgrades(eventStream.handleUpgrade));
  listener.onClientError(dispatcher.refuseUnreadableRequest);
  listener.onConnect(dispatcher.refuseTunnel);
  // What is past its time is deleted in the background (docs/decisions.md, docs/webhooks.md).
  const maintenance = new Maintenance(
    [
      { what: "expired analyze state", prune: (now, stopped) => analyzeState.prune(now, stopped) },
      { what: "expired list entries", prune: (now, stopped) => listRepository.prune(now, stopped) },
      { what: "idempotency answers past 24 hours", prune: (now, stopped) => idempotency.prune(now, stopped) },
      { what: "velocity and distinct-user counters no window reads", prune: (now, stopped) => history.pruneOutdated(now, stopped) },
      { what: "dead letters past their retention", prune: (now, stopped) => outbox.pruneDeadLetters(now, stopped) },
    ],
    clock,
    logger,
  );

  let closing: Promise<void> | undefined;
  return {
    config,
    db,
    keys,
    accounts,
    metrics,
    logger,
    outbox,
    health,
    events,
    audit,
    async settled() {
      await writer.settled();
      await outbox.drain();
    },
    async listen() {
      await Promise.all([engine.warmUp(), writer.whenReady()]);
      outbox.start();
      return listener.listen(config.port, config.host);
    },
    close() {
      closing ??= (async () => {
        health.markDraining();
        dispatcher.startDraining();
        const stopped = listener.stopAccepting();
        eventStream.close();
        const graceEnds = performance.now() + config.shutdownGraceMs;
        const timer = new Promise<void>((resolve) => setTimeout(resolve, config.shutdownGraceMs).unref());
        // Answered calls may still be running (a client that went away, a gRPC deadline): a decide among
        // them must reach the writer before it closes.
        await Promise.race([dispatcher.idle().then(() => calls.settled()), timer]);
        listener.destroyAll();
        await stopped;
        await maintenance.stop();
        // Every step runs even when one before it fails (a database gone bad, a thread that died): the
        // threads must still stop and the file close, or the process would not exit. Failures are logged.
        const step = async (name: string, work: () => unknown): Promise<void> => {
          try {
            await work();
          } catch (error) {
            logger.log("error", "shutdown step failed", { step: name, error: error instanceof Error ? error.message : String(error) });
          }
        };
        // The decisions already handed to the writer are committed; then their side effects,
        // and any other task already due, run before the database closes.
        await step("decision writer", () => writer.close());
        // What is left of the grace period, and at least a second for the follow-ups' own tasks.
        await step("outbox", () => outbox.stop(Math.max(MIN_OUTBOX_FLUSH_MS, graceEnds - performance.now())));
        await step("analyze state", () => analyzeState.flush());
        await step("engine", () => engine.close());
        await step("checkpointer", () => checkpointer.stop());
        await step("database", () => db.close());
        lock.release();
      })();
      return closing;
    },
  };
}
