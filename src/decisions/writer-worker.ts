// The decision writer's thread: it owns a read-write connection and stores the
// batches of decide writes the request thread sends, one transaction each,
// then what follows them (decision-store.ts).
import { parentPort, workerData } from "node:worker_threads";
import { AuditSigner } from "../audit/signer.js";
import { nameThread } from "../observability/thread-name.cjs";
import { openDatabase } from "../store/database.js";
import { DecisionStore } from "./decision-store.js";
import type { WriterReply, WriterRequest, WriterWorkerData } from "./writer.js";

const { dataDir, crashOnBatch } = workerData as WriterWorkerData;
nameThread("fraud-writer");
const db = openDatabase(dataDir);
// Checkpoints are the checkpointer thread's (store/checkpointer.ts). Left on, SQLite would run one inside
// whichever of this connection's commits crossed 1,000 WAL pages, fsync included, and every decide of the
// batch would wait for it.
db.pragma("wal_autocheckpoint = 0");
const store = new DecisionStore(db, AuditSigner.loadOrCreate(dataDir));
const port = parentPort;
if (!port) throw new Error("writer-worker.ts runs as a worker thread");

port.on("message", (request: WriterRequest) => {
  if (request.kind === "close") {
    // The request thread closes only once every follow-up is done; this only guards against a change to that.
    if (awaitingFollowUp.length > 0) followUp();
    db.close();
    port.close();
    return;
  }
  if (request.kind === "details") {
    try {
      store.updateRecord(request.tenant, request.decisionId, request.record);
    } catch (error) {
      port.postMessage({ kind: "detailsFailed", decisionId: request.decisionId, message: error instanceof Error ? error.message : String(error) } satisfies WriterReply);
    }
    return;
  }
  if (request.batch === crashOnBatch) process.exit(70);
  port.postMessage({ kind: "written", batch: request.batch, ...store.write(request.writes) } satisfies WriterReply);
  // The answers are on their way. What follows them waits a few milliseconds, behind the batches that arrive
  // meanwhile (their callers are waiting), then goes in one transaction for all of them.
  if (awaitingFollowUp.push(request.batch) === 1) setTimeout(followUp, FOLLOW_UP_DELAY_MS);
});

/**
 * How long follow-ups gather before their transaction: at a steady 1,000
 * decides a second, one commit then serves five batches' instead of one.
 */
const FOLLOW_UP_DELAY_MS = 5;

const awaitingFollowUp: number[] = [];
function followUp(): void {
  if (awaitingFollowUp.length === 0) return;
  const batches = awaitingFollowUp.splice(0);
  port?.postMessage({ kind: "followed", batches, ...store.followUp() } satisfies WriterReply);
}
port.postMessage({ kind: "ready", ...store.recover() } satisfies WriterReply);
