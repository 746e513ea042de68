import fs from "node:fs";
import path from "node:path";
import Database from "./sqlite-driver.cjs";
import { migrations } from "./migrations.js";

export type Db = Database.Database;

export const DATABASE_FILE = "fraud.db";

/**
 * Opens (creating if needed) the service database in `dataDir` and brings its
 * schema up to date. WAL lets the server, its workers and `fraudctl` use the
 * file at once; busy_timeout makes a writer wait for another instead of failing.
 */
export function openDatabase(dataDir: string, options: { readonly?: boolean } = {}): Db {
  const file = path.join(dataDir, DATABASE_FILE);
  try {
    return openFile(dataDir, file, options.readonly ?? false);
  } catch (error) {
    // SQLite says only "file is not a database" or "unable to open database file": name the file, and the
    // setting that chose it.
    throw new Error(`cannot use the database ${file} (FRAUD_DATA_DIR ${dataDir}): ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
}

function openFile(dataDir: string, file: string, readonly: boolean): Db {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (!readonly) createOwnerOnly(file);
  const db = new Database(file, { readonly });
  try {
    db.pragma("busy_timeout = 5000");
    if (!readonly) {
      // The database holds webhook signing secrets, the consortium key and personal data: for its owner only.
      // SQLite gives the WAL and shared-memory files the database file's mode when it creates them.
      for (const part of [file, `${file}-wal`, `${file}-shm`]) ownerOnly(part);
      db.pragma("journal_mode = WAL");
      // NORMAL is durable across process crashes in WAL mode (only a power loss
      // can drop the last commits), at a fraction of FULL's fsync cost.
      db.pragma("synchronous = NORMAL");
      db.pragma("foreign_keys = ON");
      migrate(db);
    }
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}

/**
 * Creates `file` for its owner only when it does not exist yet, before SQLite opens it: a file SQLite
 * created would be readable by others until the chmod in openDatabase, and a descriptor opened in that
 * moment would outlive it. An existing file is never opened here: closing any descriptor of a file drops
 * every POSIX lock this process holds on it, SQLite's connections' included (the writer thread opens the
 * database while the request thread's connection holds its lock). Without that lock another client
 * (`sqlite3`, fraudctl) takes itself for the last connection and deletes the WAL the server still writes to.
 */
function createOwnerOnly(file: string): void {
  try {
    fs.closeSync(fs.openSync(file, "wx", 0o600));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
}

/** Takes the group's and others' access away from `file`, if it exists and has any. */
function ownerOnly(file: string): void {
  let mode: number;
  try {
    mode = fs.statSync(file).mode & 0o777;
  } catch {
    return;
  }
  if ((mode & 0o077) !== 0) fs.chmodSync(file, mode & 0o700);
}

function migrate(db: Db): void {
  const apply = db.transaction(() => {
    const current = db.pragma("user_version", { simple: true }) as number;
    if (current > migrations.length) {
      // An older release would misread tables a newer one changed, and a newer one's repairs assume its own writes.
      throw new Error(`its schema is version ${current}, written by a newer release; this release knows versions up to ${migrations.length}`);
    }
    for (let version = current; version < migrations.length; version++) {
      db.exec(migrations[version] as string);
      db.pragma(`user_version = ${version + 1}`);
    }
  });
  // IMMEDIATE takes the write lock before reading user_version, so two
  // processes starting at once cannot both apply the same step.
  apply.immediate();
}
