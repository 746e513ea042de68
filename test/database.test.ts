import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DATABASE_FILE, openDatabase } from "../src/store/database.js";
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
