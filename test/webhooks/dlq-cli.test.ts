// `fraudctl dlq list|replay` as a real process on a real data directory.
import fs from "node:fs";
import path from "node:path";
import Database from "../../src/store/sqlite-driver.cjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFraudctl } from "../helpers/process.js";
import { tempDir } from "../helpers/server.js";

const dataDir = tempDir();
const env = { FRAUD_DATA_DIR: dataDir };
let accountId = "";
afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

beforeAll(async () => {
  const created = await runFraudctl(["accounts", "create", "--name", "Acme", "--json"], env);
  accountId = (JSON.parse(created.stdout) as { account: { id: string } }).account.id;
  // A delivery that exhausted its retries, as the server's outbox leaves it.
  const db = new Database(path.join(dataDir, "fraud.db"));
  db.prepare(
    `INSERT INTO outbox (kind, account_id, environment, payload, status, attempts, next_attempt_at, last_error, created_at, updated_at)
     VALUES ('webhook.delivery', ?, 'test', ?, 'dead', 9, 0, 'attempts_exhausted: HTTP 500 on attempt 9', 1000, 2000)`,
  ).run(accountId, JSON.stringify({ endpointId: "whe_x", eventId: "evt_x", eventType: "decision.deny", body: "{}" }));
  db.close();
}, 30_000);

describe("fraudctl dlq", () => {
  it("lists an account's dead letters and queues one again", async () => {
    const listed = await runFraudctl(["dlq", "list", "--account", accountId, "--env", "test", "--json"], env);
    expect(listed.code).toBe(0);
    const { deadLetters, count } = JSON.parse(listed.stdout) as { deadLetters: Array<{ id: string; kind: string; attempts: number; lastError: string; payload: { eventId: string } }>; count: number };
    expect(deadLetters).toHaveLength(1);
    // The page as the API answers it, count included.
    expect(count).toBe(1);
    const [letter] = deadLetters;
    expect(letter).toMatchObject({ kind: "webhook.delivery", attempts: 9, lastError: "attempts_exhausted: HTTP 500 on attempt 9", payload: { eventId: "evt_x" } });
    expect((await runFraudctl(["dlq", "list", "--account", accountId, "--env", "live", "--json"], env)).stdout).toBe('{"deadLetters":[],"count":0}\n');

    const replayed = await runFraudctl(["dlq", "replay", letter?.id ?? "", "--account", accountId, "--env", "test"], env);
    expect(replayed.code).toBe(0);
    expect(replayed.stdout).toMatch(/queued again/);
    const after = await runFraudctl(["dlq", "list", "--account", accountId, "--env", "test"], env);
    expect(after.stdout).toBe(`no dead letters in ${accountId} (test)\n`);
    const again = await runFraudctl(["dlq", "replay", letter?.id ?? "", "--account", accountId, "--env", "test"], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/no dead letter/);
  }, 30_000);

  it("takes the API's page bounds: limit 1 to 100", async () => {
    for (const limit of ["0", "101", "2.5"]) {
      const result = await runFraudctl(["dlq", "list", "--account", accountId, "--env", "test", "--limit", limit], env);
      expect(result.code, limit).toBe(2);
      expect(result.stderr).toMatch(/--limit must be a whole number from 1 to 100 in decimal digits/);
    }
    expect((await runFraudctl(["dlq", "list", "--account", accountId, "--env", "test", "--limit", "100"], env)).code).toBe(0);
  }, 30_000);

  it("explains its usage when the account or environment is missing", async () => {
    const result = await runFraudctl(["dlq", "list"], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/needs --account/);
  }, 30_000);
});
