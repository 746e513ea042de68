import fs from "node:fs";
import path from "node:path";
import Database from "./sqlite-driver.cjs";

/** The file whose lock a serving process holds, in the data directory. */
export const LOCK_FILE = "serve.lock";
/** The serving process's id, written once it holds the lock: what a refused second process names. */
export const PID_FILE = "serve.pid";

/** Another process serves the data directory already. */
export class DataDirectoryInUseError extends Error {}

/**
 * One serving process per data directory. Two would each run the outbox over
 * the same rows (every webhook delivered twice), keep rate-limit windows of
 * their own (every limit doubled) and checkpoint the same WAL.
 *
 * The lock is SQLite's own: an exclusive transaction on a small database of
 * its own, left open while the process serves. It is an advisory file lock
 * the kernel drops when the process ends, however it ends (SIGKILL included),
 * so a crashed server never leaves a stale lock behind; and SQLite enforces it
 * between connections of one process too (two apps in one test process).
 * `fraudctl`'s other commands do not take it: they run beside the server.
 */
export class DataDirectoryLock {
  private constructor(
    private readonly db: Database.Database,
    private readonly pidFile: string,
  ) {}

  static acquire(dataDir: string): DataDirectoryLock {
    const file = path.join(dataDir, LOCK_FILE);
    // SQLite creates the file, and it is made its owner's only after. Never opened with Node's fs: closing any
    // descriptor of a file drops every POSIX lock the process holds on it, this process's own lock included
    // (SQLite guards its own descriptors against that, not others'). It holds nothing secret, and the data
    // directory is its owner's only (0700).
    const db = openLockFile(dataDir, file);
    try {
      db.pragma("locking_mode = EXCLUSIVE");
      db.exec("BEGIN EXCLUSIVE");
    } catch (error) {
      db.close();
      if ((error as { code?: unknown }).code !== "SQLITE_BUSY") throw error;
      throw new DataDirectoryInUseError(`the data directory ${dataDir} is in use by another fraudctl serve${holder(dataDir)}: one process serves a data directory`);
    }
    const pidFile = path.join(dataDir, PID_FILE);
    fs.writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 });
    return new DataDirectoryLock(db, pidFile);
  }

  release(): void {
    if (!this.db.open) return;
    fs.rmSync(this.pidFile, { force: true });
    this.db.close();
  }
}

/** " (pid N)" from the holder's pid file, or nothing when it cannot be read. */
function holder(dataDir: string): string {
  try {
    const pid = Number.parseInt(fs.readFileSync(path.join(dataDir, PID_FILE), "utf8"), 10);
    return Number.isSafeInteger(pid) && pid > 0 ? ` (pid ${pid})` : "";
  } catch {
    return "";
  }
}

/** The lock's database, in a data directory made if missing; an error naming both when either fails. */
function openLockFile(dataDir: string, file: string): Database.Database {
  let db: Database.Database | undefined;
  try {
    fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    db = new Database(file, { timeout: 0 });
    fs.chmodSync(file, 0o600);
    return db;
  } catch (error) {
    db?.close();
    // SQLite says only "unable to open database file": name the file, and the setting that chose it.
    throw new Error(`cannot use the data directory ${dataDir} (FRAUD_DATA_DIR): ${file}: ${error instanceof Error ? error.message : String(error)}`);
  }
}
