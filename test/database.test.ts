import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DATABASE_FILE, openDatabase } from "../src/store/database.js";
import { migrations } from "../src/store/migrations.js";
import Database from "../src/store/sqlite-driver.cjs";
import { tempDir } from "./helpers/server.js";

const modeOf = (file: string) => fs.statSync(file).mode & 0o777;

describe("the database files", () => {
  it("are for their owner only: they hold webhook secrets, the consortium key and personal data", () => {
    const dataDir = path.join(tempDir("db-mode-"), "data");
    const db = openDatabase(dataDir);
    db.prepare("INSERT INTO accounts (id, name, created_at) VALUES ('acc_mode', 'x', 0)").run();
    const file = path.join(dataDir, DATABASE_FILE);
    expect(modeOf(dataDir)).toBe(0o700);
    for (const part of [file, `${file}-wal`, `${file}-shm`]) expect(modeOf(part), part).toBe(0o600);
    db.close();
  });

  it("takes back what an earlier release left readable by others", () => {
    const dataDir = tempDir("db-mode-old-");
    openDatabase(dataDir).close();
    const file = path.join(dataDir, DATABASE_FILE);
    fs.chmodSync(file, 0o644);
    const db = openDatabase(dataDir);
    expect(modeOf(file)).toBe(0o600);
    db.close();
  });
});

/** The POSIX locks this process holds on `file` (Linux's /proc/locks names files by inode). */
function locksHeldOn(file: string): string[] {
  const inode = fs.statSync(file).ino;
  return fs.readFileSync("/proc/locks", "utf8").split("\n").filter((line) => line.includes(` ${process.pid} `) && line.includes(`:${inode} `));
}

describe("a second connection of the same process", () => {
  // The server opens the database on its request thread and again on its writer's thread (and again when a
  // writer thread is replaced). Closing any descriptor of a file drops every POSIX lock the process holds on
  // it: then another process that opens and closes the database (an operator's sqlite3, fraudctl) takes
  // itself for the last connection and deletes the WAL the server still writes to.
  it.runIf(fs.existsSync("/proc/locks"))("leaves the first one's lock on the database file in place", () => {
    const dataDir = tempDir("db-lock-");
    const first = openDatabase(dataDir);
    first.prepare("INSERT INTO accounts (id, name, created_at) VALUES ('acc_one', 'x', 0)").run();
    const file = path.join(dataDir, DATABASE_FILE);
    expect(locksHeldOn(file)).not.toEqual([]);
    const second = openDatabase(dataDir);
    expect(locksHeldOn(file)).not.toEqual([]);

    const cli = spawnSync("sqlite3", [file, "SELECT COUNT(*) FROM accounts"], { encoding: "utf8" });
    if (cli.error === undefined) {
      // Where sqlite3 is installed: it reads, closes, and leaves the live WAL alone.
      expect(cli.stdout.trim()).toBe("1");
      expect(fs.existsSync(`${file}-wal`)).toBe(true);
      first.prepare("INSERT INTO accounts (id, name, created_at) VALUES ('acc_two', 'z', 0)").run();
      expect(spawnSync("sqlite3", [file, "SELECT COUNT(*) FROM accounts"], { encoding: "utf8" }).stdout.trim()).toBe("2");
    }
    second.close();
    first.close();
  });
});

describe("a database a newer release wrote", () => {
  it("is refused, naming both schema versions, instead of being used by a release that would misread it", () => {
    const dataDir = tempDir("db-newer-");
    openDatabase(dataDir).close();
    const newer = new Database(path.join(dataDir, DATABASE_FILE));
    newer.pragma(`user_version = ${migrations.length + 1}`);
    newer.close();
    expect(() => openDatabase(dataDir)).toThrow(
      `cannot use the database ${dataDir}/${DATABASE_FILE} (FRAUD_DATA_DIR ${dataDir}): its schema is version ${migrations.length + 1}, written by a newer release; this release knows versions up to ${migrations.length}`,
    );
  });
});

describe("migration 15", () => {
  /** A database as release `version` left it, with tasks pending and dead, opened by this release. */
  function upgradedFrom(version: number): Array<{ kind: string; lane: string }> {
    const dataDir = tempDir("db-lanes-");
    const old = new Database(path.join(dataDir, DATABASE_FILE));
    for (const step of migrations.slice(0, version)) old.exec(step);
    old.pragma(`user_version = ${version}`);
    const insert = old.prepare("INSERT INTO outbox (kind, account_id, environment, payload, status, next_attempt_at, created_at, updated_at) VALUES (?, 'acct', 'live', ?, ?, 0, 0, 0)");
    insert.run("webhook.delivery", JSON.stringify({ endpointId: "whe_stuck", eventId: "evt_1", eventType: "decision.allow", body: "{}" }), "pending");
    insert.run("webhook.delivery", JSON.stringify({ endpointId: "whe_gone", eventId: "evt_2", eventType: "decision.deny", body: "{}" }), "dead");
    insert.run("consortium.share", JSON.stringify({ batchId: "cb_1", indicators: [] }), "pending");
    insert.run("event", JSON.stringify({ body: "{}" }), "pending");
    insert.run("webhook.delivery", "not json", "dead");
    old.close();
    const db = openDatabase(dataDir);
    try {
      return db.prepare("SELECT kind, lane FROM outbox ORDER BY id").all() as Array<{ kind: string; lane: string }>;
    } finally {
      db.close();
    }
  }

  it("gives the outbox tasks written before lanes existed their lanes, from their payloads", () => {
    const expected = [
      { kind: "webhook.delivery", lane: "whe_stuck" },
      { kind: "webhook.delivery", lane: "whe_gone" },
      { kind: "consortium.share", lane: "consortium" },
      { kind: "event", lane: "" },
      { kind: "webhook.delivery", lane: "" },
    ];
    // From before migration 14, and from a database that ran 14 while it did not give lanes yet.
    expect(upgradedFrom(13)).toEqual(expected);
    expect(upgradedFrom(14)).toEqual(expected);
  });
});
