import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createLogger } from "../src/log.js";
import { AnalyzeStateRepository } from "../src/store/analyze-state.js";
import { openDatabase } from "../src/store/database.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-analyze-state-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe("analyze state", () => {
  it("commits one turn's puts together after it, and a failing commit costs that turn's state, not the process", async () => {
    const db = openDatabase(dir);
    const lines: string[] = [];
    const state = new AnalyzeStateRepository(db, createLogger((line) => lines.push(line)));
    const tenant = { accountId: "acc_1", environment: "test" as const };
    state.put(tenant, "visitor:a", { score: 1 }, Date.now() + 60_000);
    state.put(tenant, "visitor:b", { score: 2 }, Date.now() + 60_000);
    expect(db.prepare("SELECT count(*) AS n FROM analyze_state").get()).toEqual({ n: 0 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(db.prepare("SELECT count(*) AS n FROM analyze_state").get()).toEqual({ n: 2 });

    // The table is gone (as a full disk or an I/O error would fail the commit): the flush after the turn throws.
    db.exec("DROP TABLE analyze_state");
    state.put(tenant, "visitor:c", { score: 3 }, Date.now() + 60_000);
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines.some((line) => line.includes("could not store analyze state"))).toBe(true);
    db.close();
  });
});
