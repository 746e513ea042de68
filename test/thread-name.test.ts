import fs from "node:fs";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { startTestServer } from "./helpers/server.js";

/** The names of this process's threads, as the operating system reports them (top -H, ps -L). */
function threadNames(): string[] {
  return fs.readdirSync("/proc/self/task").map((tid) => {
    try {
      return fs.readFileSync(`/proc/self/task/${tid}/comm`, "utf8").trim();
    } catch {
      return ""; // ended meanwhile
    }
  });
}

const THREAD_NAME_MODULE = new URL("../src/observability/thread-name.cjs", import.meta.url).pathname;

describe.runIf(fs.existsSync("/proc/thread-self/comm"))("thread names", () => {
  it("names the calling thread, cut to the 15 bytes Linux keeps", async () => {
    const worker = new Worker(
      `const { nameThread } = require(${JSON.stringify(THREAD_NAME_MODULE)});
       nameThread("fraud-a-rather-long-name");
       require("node:worker_threads").parentPort.postMessage("named");
       setTimeout(() => {}, 10_000);`,
      { eval: true },
    );
    try {
      await new Promise((resolve) => worker.once("message", resolve));
      expect(threadNames()).toContain("fraud-a-rather-");
    } finally {
      await worker.terminate();
    }
  });

  it("lets the service's engine, writer and checkpointer threads be told apart", async () => {
    const server = await startTestServer();
    try {
      const names = threadNames();
      for (const name of ["fraud-engine", "fraud-writer", "fraud-wal"]) expect(names).toContain(name);
    } finally {
      await server.close();
    }
  });
});
