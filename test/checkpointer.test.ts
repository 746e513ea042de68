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

/**
 * Commits of a constant load: 3,000 rows of 4 KiB, 12 MiB, far more than the limits below let the WAL
 * hold. A number of commits, not a duration, so that a slow machine writes as much as a fast one.
 */
const CONSTANT_COMMITS = 3_000;
/** Between two commits: the decision writer's thread idles 0.1 ms and more between batches even when the service is saturated. */
const GAP_MS = 0.1;

/**
 * A writer thread that commits `commits` transactions one after another,
 * each a read then a 4 KiB row, {@link GAP_MS} apart, and optionally a lull
 * after every burst.
 */
function writeConstantly(file: string, commits: number, lulls?: Lulls): Promise<void> {
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
    let commits = 0;
    const gap = new Int32Array(new SharedArrayBuffer(4));
    while (commits < workerData.commits) {
      write.immediate();
      commits++;
      Atomics.wait(gap, 0, 0, workerData.gapMs);
      if (workerData.lulls && commits % workerData.lulls.every === 0) Atomics.wait(gap, 0, 0, workerData.lulls.ms);
    }
    db.close();
    parentPort.postMessage("done");
  `;
  return new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { file, commits, gapMs: GAP_MS, lulls, driver: SQLITE_DRIVER } });
    worker.once("message", () => resolve());
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

  /** The WAL file's size once `commits` commits are written: the most it held since it was last truncated. */
  async function walBytesAfterLoad(options: CheckpointerOptions, commits: number, lulls?: Lulls): Promise<{ walBytes: number; writtenBytes: number }> {
    // The WAL starts empty: the schema's migrations are not counted against the limits.
    db.pragma("wal_checkpoint(TRUNCATE)");
    const checkpointer = new Checkpointer(db, dir, createLogger(() => undefined), options);
    try {
      await writeConstantly(join(dir, DATABASE_FILE), commits, lulls);
      return { walBytes: statSync(join(dir, `${DATABASE_FILE}-wal`)).size, writtenBytes: commits * 4096 };
    } finally {
      await checkpointer.stop();
    }
  }

  it("keeps the WAL near its limits by starting it over, even when commits hardly pause", async () => {
    // 256 and 512 frames of 4 KiB: about 1 and 2 MiB.
    const { walBytes } = await walBytesAfterLoad({ intervalMs: 10, restartAboveFrames: 256, forceRestartAboveFrames: 512, stuckWarningMs: 5_000 }, CONSTANT_COMMITS);
    // Without restarts the WAL would hold all of the 12 MiB written, and more (the last test).
    expect(walBytes).toBeLessThan(8 * 1024 * 1024);
  });

  it("starts it over below the hard limit when commits pause now and then", async () => {
    // No forced restart (which holds writers for its copy and fsyncs): only at moments when the WAL is wholly
    // copied. A lull must outlast a pass's fsyncs for there to be one; 2 ms gaps between all commits did
    // not, on a loaded machine.
    // 40 bursts of 20 commits: 3.2 MiB, whose third is past the 1 MiB bound below.
    const { walBytes, writtenBytes } = await walBytesAfterLoad(
      { intervalMs: 10, restartAboveFrames: 32, forceRestartAboveFrames: Number.MAX_SAFE_INTEGER, stuckWarningMs: 5_000 },
      800,
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
      stuckWarningMs: 300,
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
      const pastLimit = Date.now();
      const deadline = Date.now() + 10_000;
      while (!lines.some((line) => line.includes("the WAL cannot start over")) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const warnings = lines.filter((line) => line.includes("the WAL cannot start over"));
      expect(warnings).toHaveLength(1);
      // After the WAL had stayed past the limit for the time given, not after a count of ticks (5 ms each).
      expect(Date.now() - pastLimit).toBeGreaterThanOrEqual(300);
      expect((JSON.parse(warnings[0] as string) as { walFrames: number }).walFrames).toBeGreaterThan(32);
    } finally {
      reader.exec("COMMIT");
      reader.close();
      await checkpointer.stop();
    }
  });

  it("lets it grow with every commit when it never starts over (what the limits are for)", async () => {
    const { walBytes, writtenBytes } = await walBytesAfterLoad(
      { intervalMs: 10, restartAboveFrames: Number.MAX_SAFE_INTEGER, forceRestartAboveFrames: Number.MAX_SAFE_INTEGER, stuckWarningMs: 5_000 },
      CONSTANT_COMMITS,
    );
    expect(walBytes).toBeGreaterThan(writtenBytes / 2);
    // The same load as the first test's, which its limits keep under 8 MiB.
    expect(walBytes).toBeGreaterThan(8 * 1024 * 1024);
  });
});
