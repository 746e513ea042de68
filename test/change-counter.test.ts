import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_WEIGHTS } from "../src/engine/index.js";
import { AccountRepository } from "../src/store/accounts.js";
import { ApiKeyRepository, type ApiKeyRecord } from "../src/store/api-keys.js";
import { openDatabase } from "../src/store/database.js";
import { WeightsRepository } from "../src/store/weights.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-change-counter-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
// Two connections to one database: the service's, and another process's (fraudctl, or a second server).
const here = openDatabase(dir);
const elsewhere = openDatabase(dir);
afterAll(() => {
  here.close();
  elsewhere.close();
});
const accountId = new AccountRepository(here).create("Acme", {}, Date.now()).id;
const tenant = { accountId, environment: "live" as const };

describe("what the hot path reads from the store once per event-loop turn", () => {
  it("sees a key revoked by another connection from the next turn, and one revoked here at once", async () => {
    const keys = new ApiKeyRepository(here);
    const record = (id: string, keyHash: string): ApiKeyRecord => ({
      id,
      accountId,
      environment: "live",
      kind: "secret",
      permissions: undefined,
      keyHash,
      last4: keyHash.slice(-4),
      name: id,
      createdAt: Date.now(),
      expiresAt: undefined,
      revokedAt: undefined,
      replacedBy: undefined,
    });
    keys.insert(record("key_a", "a".repeat(64)));
    keys.insert(record("key_b", "b".repeat(64)));
    // Inserted here: found within the same turn.
    expect(keys.findByHash("a".repeat(64))?.revokedAt).toBeUndefined();

    elsewhere.prepare("UPDATE api_keys SET revoked_at = 1 WHERE id = 'key_a'").run();
    expect(keys.findByHash("a".repeat(64))?.revokedAt).toBeUndefined();
    await nextTurn();
    expect(keys.findByHash("a".repeat(64))?.revokedAt).toBe(1);

    expect(keys.findByHash("b".repeat(64))?.revokedAt).toBeUndefined();
    expect(keys.revoke("key_b", 2)).toBe(true);
    expect(keys.findByHash("b".repeat(64))?.revokedAt).toBe(2);
  });

  it("sees weights changed by another connection from the next turn, and its own change at once", async () => {
    const weights = new WeightsRepository(here);
    expect(weights.current(tenant)).toBe(DEFAULT_WEIGHTS);

    const moved = { ...DEFAULT_WEIGHTS.weights, network: DEFAULT_WEIGHTS.weights.network + 0.01, email: DEFAULT_WEIGHTS.weights.email - 0.01 };
    const other = new WeightsRepository(elsewhere);
    expect(other.replace(tenant, DEFAULT_WEIGHTS.version, moved, Date.now())).toBe(true);
    expect(weights.current(tenant).version).toBe(DEFAULT_WEIGHTS.version);
    await nextTurn();
    expect(weights.current(tenant)).toEqual({ version: DEFAULT_WEIGHTS.version + 1, weights: moved });

    // A replace from the stale reading of the same turn loses, and the next reading is fresh.
    const movedAgain = { ...moved, network: moved.network + 0.01, email: moved.email - 0.01 };
    expect(other.replace(tenant, DEFAULT_WEIGHTS.version + 1, movedAgain, Date.now())).toBe(true);
    const stale = weights.current(tenant);
    expect(stale.version).toBe(DEFAULT_WEIGHTS.version + 1);
    expect(weights.replace(tenant, stale.version, moved, Date.now())).toBe(false);
    expect(weights.current(tenant)).toEqual({ version: DEFAULT_WEIGHTS.version + 2, weights: movedAgain });

    // Its own change, seen within the turn.
    expect(weights.replace(tenant, DEFAULT_WEIGHTS.version + 2, moved, Date.now())).toBe(true);
    expect(weights.current(tenant)).toEqual({ version: DEFAULT_WEIGHTS.version + 3, weights: moved });
  });
});
