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
  fs.mkdirSync(dataDir, { recursive: true });
  const db = new Database(path.join(dataDir, DATABASE_FILE), { readonly: options.readonly ?? false });
  db.pragma("busy_timeout = 5000");
  if (!options.readonly) {
    db.pragma("journal_mode = WAL");
    // NORMAL is durable across process crashes in WAL mode (only a power loss
    // can drop the last commits), at a fraction of FULL's fsync cost.
    db.pragma("synchronous = NORMAL");
    db.pragma("foreign_keys = ON");
    migrate(db);
  }
  return db;
}

function migrate(db: Db): void {
  const apply = db.transaction(() => {
    const current = db.pragma("user_version", { simple: true }) as number;
    for (let version = current; version < migrations.length; version++) {
      db.exec(migrations[version] as string);
      db.pragma(`user_version = ${version + 1}`);
    }
  });
  // IMMEDIATE takes the write lock before reading user_version, so two
  // processes starting at once cannot both apply the same step.
  apply.immediate();
}
