import fs from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { DataDirectoryInUseError, DataDirectoryLock } from "../src/store/data-dir-lock.js";
import { runFraudctl } from "./helpers/process.js";
import { tempDir } from "./helpers/server.js";

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe("the data directory's lock", () => {
  it("stays held when a second attempt in the same process fails, and is free again once released", async () => {
    const held = DataDirectoryLock.acquire(dir);
    try {
      expect(() => DataDirectoryLock.acquire(dir)).toThrow(DataDirectoryInUseError);
      // Another process is still refused: the failed attempt let go of nothing of the holder's.
      const other = await runFraudctl(["serve"], { FRAUD_DATA_DIR: dir, PORT: "0", HOST: "127.0.0.1" });
      expect(other.code).toBe(1);
      expect(other.stderr).toContain(`is in use by another fraudctl serve (pid ${process.pid})`);
    } finally {
      held.release();
    }
    expect(fs.statSync(`${dir}/serve.lock`).mode & 0o777).toBe(0o600);
    DataDirectoryLock.acquire(dir).release();
  }, 30_000);

  it("names the directory, the file and FRAUD_DATA_DIR when it cannot be used", () => {
    // A data directory path under a regular file, and a lock file that is a directory (SQLite's bare
    // "unable to open database file"): the tests run as root, to whom no permission is denied.
    const file = `${dir}/a-file`;
    fs.writeFileSync(file, "");
    expect(() => DataDirectoryLock.acquire(`${file}/data`)).toThrow(`cannot use the data directory ${file}/data (FRAUD_DATA_DIR): ${file}/data/serve.lock: ENOTDIR`);
    const blocked = `${dir}/blocked`;
    fs.mkdirSync(`${blocked}/serve.lock`, { recursive: true });
    expect(() => DataDirectoryLock.acquire(blocked)).toThrow(`cannot use the data directory ${blocked} (FRAUD_DATA_DIR): ${blocked}/serve.lock: unable to open database file`);
  });
});
