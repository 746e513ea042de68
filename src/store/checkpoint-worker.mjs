// Moves WAL checkpoints (and their fsyncs) off the request thread: the server's
// own connection has auto-checkpointing off, and this thread checkpoints on a
// timer through a connection of its own. Plain JavaScript, as it needs no types
// and runs in a worker thread without a TypeScript loader.
import { parentPort, workerData } from "node:worker_threads";
import Database from "better-sqlite3";

const { file, intervalMs } = workerData;
const db = new Database(file);
db.pragma("busy_timeout = 5000");

const timer = setInterval(() => {
  try {
    db.pragma("wal_checkpoint(PASSIVE)");
  } catch (error) {
    parentPort?.postMessage({ error: String(error) });
  }
}, intervalMs);

parentPort?.on("message", (message) => {
  if (message !== "stop") return;
  clearInterval(timer);
  try {
    db.pragma("wal_checkpoint(TRUNCATE)");
  } finally {
    db.close();
    parentPort?.close();
  }
});
