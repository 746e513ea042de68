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
import { openDatabase } from "../../src/store/database.js";
import { feedbackProcessorOn } from "./feedback-processor.js";

const [dataDir, accountId, environment, ...decisionIds] = process.argv.slice(2);
if (!dataDir || !accountId || (environment !== "test" && environment !== "live")) throw new Error("usage: DATA_DIR ACCOUNT ENV DECISION_ID...");

const db = openDatabase(dataDir);
const processor = feedbackProcessorOn(db, dataDir);

// Every writer starts at the same moment, so their read-compute-write cycles overlap.
process.stderr.write("ready\n");
await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
process.stdin.pause();
// Fraud and legitimate labels in turn: the weights keep moving, one way then the other, instead of settling
// against a bound where a label moves nothing.
const results = decisionIds.map((decisionId, index) => {
  try {
    const actualOutcome = index % 2 === 0 ? "fraud" : "legitimate";
    const applied = processor.submit({ accountId, environment }, "cli", { decisionId, evidenceId: "", userId: "", actualOutcome, confidence: 1, notes: "" });
    return { ok: true as const, before: applied.weightsVersionBefore, after: applied.weightsVersionAfter };
  } catch (error) {
    if (error instanceof ConnectError) return { ok: false as const, code: describeError(error).code };
    throw error;
  }
});
db.close();
process.stdout.write(JSON.stringify(results) + "\n");
