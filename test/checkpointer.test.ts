import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Checkpointer, type CheckpointerOptions } from "../src/store/checkpointer.js";
import { DATABASE_FILE, openDatabase, type Db } from "../src/store/database.js";
import { createLogger } from "../src/log.js";

/** The service's better-sqlite3 (src/store/sqlite-driver.cjs), for the writer thread's plain script. */
const SQLITE_DRIVER = fileURLToPath(new URL("../src/store/sqlite-driver.cjs", import.meta.url));

/** Commits `every` in a row, then a pause of `ms`: a burst of decides, then a lull. */
interface Lulls {
  every: number;
  ms: number;
}

/** How long each test's writer writes. */
const LOAD_MS = 1_500;
/** Between two commits: the decision writer's thread idles 0.1 ms and more between batches even when the service is saturated. */
const GAP_MS = 0.1;

/**
 * A writer thread that commits one transaction after another for
 * {@link LOAD_MS}, each a read then a 4 KiB row, {@link GAP_MS} apart, and
 * optionally a lull after every burst. Resolves with the number of commits.
 */
function writeConstantly(file: string, lulls?: Lulls): Promise<number> {
  const source = `
    const { workerData, parentPort } = require("node:worker_threads");
    const Database = require(workerData.driver);
    const db = new Database(workerData.file);
    db.pragma("busy_timeout = 5000");
    db.pragma("wal_autocheckpoint = 0");
    db.pragma("synchronous = NORMAL");
    db.exec("CREATE TABLE IF NOT EXISTS filler (id INTEGER PRIMARY KEY, body BLOB NOT NULL)");
    const count = db.prepare("SELECT count(*) AS n FROM filler");
    const insert = db.prepare("INSERT INTO filler (body) VALUES (randomblob(4000))");
    const write = db.transaction(() => { count.get(); insert.run(); });
    const until = Date.now() + workerData.ms;
    let commits = 0;
    const gap = new Int32Array(new SharedArrayBuffer(4));
    while (Date.now() < until) {
      write.immediate();
      commits++;
      Atomics.wait(gap, 0, 0, workerData.gapMs);
      if (workerData.lulls && commits % workerData.lulls.every === 0) Atomics.wait(gap, 0, 0, workerData.lulls.ms);
    }
    db.close();
    parentPort.postMessage(commits);
  `;
  return new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { file, ms: LOAD_MS, gapMs: GAP_MS, lulls, driver: SQLITE_DRIVER } });
    worker.once("message", resolve);
    worker.once("error", reject);
  });
}

describe("WAL checkpoints under constant writes", () => {
  let dir: string;
  let db: Db;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "fraud-checkpoint-"));
    db = openDatabase(dir);
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function walBytesAfterLoad(options: CheckpointerOptions, lulls?: Lulls): Promise<{ walBytes: number; writtenBytes: number }> {
    // The WAL starts empty: the schema's migrations are not counted against the limits.
    db.pragma("wal_checkpoint(TRUNCATE)");
    const checkpointer = new Checkpointer(db, dir, createLogger(() => undefined), options);
    try {
      const commits = await writeConstantly(join(dir, DATABASE_FILE), lulls);
      return { walBytes: statSync(join(dir, `${DATABASE_FILE}-wal`)).size, writtenBytes: commits * 4096 };
    } finally {
      await checkpointer.stop();
    }
  }

  it("keeps the WAL near its limits by starting it over, even when commits hardly pause", async () => {
    // 256 and 512 frames of 4 KiB: about 1 and 2 MiB.
    const { walBytes, writtenBytes } = await walBytesAfterLoad({ intervalMs: 10, restartAboveFrames: 256, forceRestartAboveFrames: 512 });
    expect(writtenBytes).toBeGreaterThan(10 * 1024 * 1024);
    expect(walBytes).toBeLessThan(8 * 1024 * 1024);
  });

  it("starts it over below the hard limit when commits pause now and then", async () => {
    // No forced restart (which holds writers for its copy and fsyncs): only at moments when the WAL is wholly
    // copied. A lull must outlast a pass's fsyncs for there to be one; 2 ms gaps between all commits did
    // not, on a loaded machine.
    const { walBytes, writtenBytes } = await walBytesAfterLoad(
      { intervalMs: 10, restartAboveFrames: 32, forceRestartAboveFrames: Number.MAX_SAFE_INTEGER },
      { every: 20, ms: 50 },
    );
    // It never holds much more than the limit and a burst or two (20 commits of about 3 frames each), and far
    // less than was written (which it would hold without restarts, as the last test shows).
    expect(walBytes).toBeLessThan(1024 * 1024);
    expect(walBytes).toBeLessThan(writtenBytes / 3);
  });

  it("says so in the log when a reader keeps even the forced restart out", async () => {
    const lines: string[] = [];
    const checkpointer = new Checkpointer(db, dir, createLogger((line) => lines.push(line)), {
      intervalMs: 5,
      restartAboveFrames: 16,
      forceRestartAboveFrames: 32,
    });
    const reader = openDatabase(dir);
    try {
      db.exec("CREATE TABLE filler (id INTEGER PRIMARY KEY, body BLOB NOT NULL)");
      const insert = db.prepare("INSERT INTO filler (body) VALUES (randomblob(4000))");
      insert.run();
      // A read transaction left open keeps its snapshot, and with it the WAL, from being started over.
      reader.exec("BEGIN");
      reader.prepare("SELECT count(*) AS n FROM filler").get();
      for (let i = 0; i < 100; i++) insert.run();
      const deadline = Date.now() + 10_000;
      while (!lines.some((line) => line.includes("the WAL cannot start over")) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const warnings = lines.filter((line) => line.includes("the WAL cannot start over"));
      expect(warnings).toHaveLength(1);
      expect((JSON.parse(warnings[0] as string) as { walFrames: number }).walFrames).toBeGreaterThan(32);
    } finally {
      reader.exec("COMMIT");
      reader.close();
      await checkpointer.stop();
    }
  });

  it("lets it grow with every commit when it never starts over (what the limits are for)", async () => {
    const { walBytes, writtenBytes } = await walBytesAfterLoad({
      intervalMs: 10,
      restartAboveFrames: Number.MAX_SAFE_INTEGER,
      forceRestartAboveFrames: Number.MAX_SAFE_INTEGER,
    });
    expect(walBytes).toBeGreaterThan(writtenBytes / 2);
  });
});
