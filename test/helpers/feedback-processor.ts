// A FeedbackProcessor wired to a database the way the server wires it, for the tests that drive feedback
// without a server in between (another process sharing the database, or a repository made to misbehave).
import { AuditLog } from "../../src/audit/log.js";
import { AuditSigner } from "../../src/audit/signer.js";
import { systemClock } from "../../src/clock.js";
import { EventPublisher } from "../../src/events/publisher.js";
import { FeedbackProcessor } from "../../src/feedback/processor.js";
import { silentLogger } from "../../src/log.js";
import { Outbox } from "../../src/outbox/outbox.js";
import { SqliteAuditStore } from "../../src/store/audit.js";
import { ConsortiumRepository } from "../../src/store/consortium.js";
import { DecisionRepository } from "../../src/store/decisions.js";
import { FeedbackRepository } from "../../src/store/feedback.js";
import { GraphRepository } from "../../src/store/graph.js";
import { HistoryRepository } from "../../src/store/history.js";
import { ListRepository } from "../../src/store/lists.js";
import type { Db } from "../../src/store/database.js";
import { WeightsRepository } from "../../src/store/weights.js";

/** `dataDir` holds the installation's audit signing key; `weights` replaces the weights repository. */
export function feedbackProcessorOn(db: Db, dataDir: string, weights: WeightsRepository = new WeightsRepository(db)): FeedbackProcessor {
  const outbox = new Outbox(db, systemClock, silentLogger);
  const auditStore = new SqliteAuditStore(db);
  const auditSigner = AuditSigner.loadOrCreate(dataDir);
  return new FeedbackProcessor({
    db,
    clock: systemClock,
    decisions: new DecisionRepository(db),
    feedback: new FeedbackRepository(db),
    weights,
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
}
