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
});
