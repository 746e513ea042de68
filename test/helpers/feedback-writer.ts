// A separate process submitting feedback straight to a data directory with the
// real FeedbackProcessor, for the concurrency test: several of these at once
// stand in for several server processes sharing one database.
//
//   node --import tsx test/helpers/feedback-writer.ts DATA_DIR ACCOUNT ENV DECISION_ID...
//
// Once ready it writes "ready" to stderr and waits for a line on stdin, so the parent starts every writer at
// the same moment however long each took to load. Prints one JSON line: the result (or error code) of each
// submission, in order.
import { ConnectError } from "@connectrpc/connect";
import { describeError } from "../../src/api/errors.js";
import { AuditLog } from "../../src/audit/log.js";
import { AuditSigner } from "../../src/audit/signer.js";
import { systemClock } from "../../src/clock.js";
import { EventPublisher } from "../../src/events/publisher.js";
import { FeedbackProcessor } from "../../src/feedback/processor.js";
import { silentLogger } from "../../src/log.js";
import { Outbox } from "../../src/outbox/outbox.js";
import { SqliteAuditStore } from "../../src/store/audit.js";
import { ConsortiumRepository } from "../../src/store/consortium.js";
import { openDatabase } from "../../src/store/database.js";
import { DecisionRepository } from "../../src/store/decisions.js";
import { FeedbackRepository } from "../../src/store/feedback.js";
import { GraphRepository } from "../../src/store/graph.js";
import { HistoryRepository } from "../../src/store/history.js";
import { ListRepository } from "../../src/store/lists.js";
import { WeightsRepository } from "../../src/store/weights.js";

const [dataDir, accountId, environment, ...decisionIds] = process.argv.slice(2);
if (!dataDir || !accountId || (environment !== "test" && environment !== "live")) throw new Error("usage: DATA_DIR ACCOUNT ENV DECISION_ID...");

const db = openDatabase(dataDir);
const outbox = new Outbox(db, systemClock, silentLogger);
const auditStore = new SqliteAuditStore(db);
const auditSigner = AuditSigner.loadOrCreate(dataDir);
const processor = new FeedbackProcessor({
  db,
  clock: systemClock,
  decisions: new DecisionRepository(db),
  feedback: new FeedbackRepository(db),
  weights: new WeightsRepository(db),
  graph: new GraphRepository(db),
  history: new HistoryRepository(db),
  lists: new ListRepository(db),
  consortium: new ConsortiumRepository(db),
  outbox,
  events: new EventPublisher(outbox, systemClock),
  audit: new AuditLog(auditStore, auditSigner, systemClock),
  auditEntries: auditStore,
  auditPublicKey: auditSigner.publicKey,
  listsChanged: () => {},
});

// Every writer starts at the same moment, so their read-compute-write cycles overlap.
process.stderr.write("ready\n");
await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
process.stdin.pause();
const results = decisionIds.map((decisionId) => {
  try {
    const applied = processor.submit({ accountId, environment }, "cli", { decisionId, evidenceId: "", userId: "", actualOutcome: "fraud", confidence: 1, notes: "" });
    return { ok: true as const, before: applied.weightsVersionBefore, after: applied.weightsVersionAfter };
  } catch (error) {
    if (error instanceof ConnectError) return { ok: false as const, code: describeError(error).code };
    throw error;
  }
});
db.close();
process.stdout.write(JSON.stringify(results) + "\n");
