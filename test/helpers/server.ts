import fs from "node:fs";
import { loadConfig, type Config } from "../../src/config.js";
import type { Clock } from "../../src/clock.js";
import { createLogger, type Logger } from "../../src/log.js";
import { buildApp, type App } from "../../src/server/app.js";
import { tempDir } from "./temp-dirs.js";
import type { AccountKeys } from "../../src/auth/key-service.js";
import type { ConnectionTimeouts } from "../../src/server/listener.js";

export interface TestServer {
  app: App;
  url: string;
  port: number;
  dataDir: string;
  /** Every log line the server wrote. */
  logs: string[];
  createAccount(name?: string, rateLimitOverrides?: Record<string, number>): AccountKeys;
  close(): Promise<void>;
}

export { tempDir } from "./temp-dirs.js";

/** The real server on an ephemeral port with a real SQLite file in a temp dir. */
export async function startTestServer(
  options: { clock?: Clock; config?: Partial<Config>; env?: NodeJS.ProcessEnv; storeLatencyMs?: number; streamHeartbeatMs?: number; connectionTimeouts?: ConnectionTimeouts } = {},
): Promise<TestServer> {
  const dataDir = options.config?.dataDir ?? tempDir();
  const config: Config = {
    ...loadConfig({ ...options.env, FRAUD_DATA_DIR: dataDir }),
    port: 0,
    host: "127.0.0.1",
    shutdownGraceMs: 2_000,
    // A loaded machine (CI on two shared cores) must not turn a decide into a fast-path answer, without the
    // store's signals (velocity, history), that the test did not ask for: the tests of that path set their own.
    comprehensiveBudgetMs: 5_000,
    ...options.config,
  };
  const logs: string[] = [];
  const logger: Logger = createLogger((line) => logs.push(line));
  const app = buildApp({
    config,
    clock: options.clock,
    logger,
    storeLatencyMs: options.storeLatencyMs,
    streamHeartbeatMs: options.streamHeartbeatMs,
    connectionTimeouts: options.connectionTimeouts,
  });
  const address = await app.listen();
  return {
    app,
    url: `http://127.0.0.1:${address.port}`,
    port: address.port,
    dataDir,
    logs,
    createAccount: (name = "Test", overrides = {}) => app.keys.createAccount(name, overrides),
    close: async () => {
      // The temp dir goes even when closing fails; the failure still reaches the caller.
      try {
        await app.close();
      } finally {
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    },
  };
}
