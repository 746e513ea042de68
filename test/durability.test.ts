import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import Database from "../src/store/sqlite-driver.cjs";
import { afterAll, describe, expect, it } from "vitest";
import { runFraudctl, startServerProcess } from "./helpers/process.js";
import { HUMAN_DESKTOP, UK_IP, botAttack } from "./helpers/inputs.js";
import { tempDir } from "./helpers/server.js";

const dataDir = tempDir();
const env = { FRAUD_DATA_DIR: dataDir, FRAUD_SEED_DEMO: "false", FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" };
afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

describe("a decide that answered 200 is never lost", () => {
  it("survives SIGKILL under load: every answered decision and its side effects are there after restart, once", async () => {
    const created = await runFraudctl(["accounts", "create", "--name", "Durable", "--decide-rate-limit", "100000", "--json"], env);
    const key = (JSON.parse(created.stdout) as { keys: { live: { secret: string } } }).keys.live.secret;
    const first = await startServerProcess(env);
    // A real receiver for the decisions' and cases' webhooks, which must arrive too, whichever server sends them.
    const received: Array<{ id: string; type: string; data: { evidenceId?: string; case?: { decisionId: string } } }> = [];
    const receiver = http.createServer((req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => (body += chunk.toString()));
      req.on("end", () => {
        received.push(JSON.parse(body) as (typeof received)[number]);
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const endpoint = await fetch(`${first.url}/api/v1/webhooks/endpoints`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key },
      body: JSON.stringify({ url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`, events: ["decision.allow", "decision.challenge", "decision.deny", "case.created"] }),
    });
    expect(endpoint.status).toBe(201);

    const answered: Array<{ evidenceId: string; score: number }> = [];
    let stop = false;
    const worker = async (n: number) => {
      for (let i = 0; !stop; i++) {
        const body = i % 3 === 0 ? { userId: `bot_${n}_${i}`, action: "signup", ...botAttack("185.220.101.45") } : { userId: `user_${n}_${i}`, action: "login", ip: UK_IP, ...HUMAN_DESKTOP };
        try {
          const res = await fetch(`${first.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
          if (res.status === 200) answered.push(((await res.json()) as { data: { evidenceId: string; score: number } }).data);
        } catch {
          return; // the server is gone
        }
      }
    };
    const load = Promise.all([0, 1, 2, 3, 4, 5].map(worker));
    // Killed under load once a good number of decides have answered, however slow the machine.
    await expect.poll(() => answered.length, { timeout: 20_000, interval: 20 }).toBeGreaterThanOrEqual(25);
    first.child.kill("SIGKILL");
    stop = true;
    await load;
    await first.exited;

    const second = await startServerProcess(env);
    try {
      // The restarted server carries out whatever was pending when the first one died.
      await expect.poll(async () => {
        const health = (await (await fetch(`${second.url}/api/health`)).json()) as { checks: Array<{ name: string; detail: string }> };
        return health.checks.find((c) => c.name === "background")?.detail;
      }, { timeout: 15_000, interval: 200 }).toBe("0 pending background tasks");

      const db = new Database(path.join(dataDir, "fraud.db"), { readonly: true });
      try {
        const decisionOf = db.prepare("SELECT id, score FROM decisions WHERE evidence_id = ?");
        const casesOf = db.prepare("SELECT COUNT(*) AS n FROM cases WHERE decision_id = ?");
        const entriesOf = db.prepare("SELECT COUNT(*) AS n FROM audit_log WHERE action = 'decision.made' AND subject = ?");
        for (const { evidenceId, score } of answered) {
          const decision = decisionOf.get(evidenceId) as { id: string; score: number } | undefined;
          expect(decision, evidenceId).toBeDefined();
          expect(decision?.score).toBe(score);
          expect((casesOf.get(decision?.id) as { n: number }).n).toBe(score >= 80 ? 1 : 0);
          expect((entriesOf.get(decision?.id) as { n: number }).n).toBe(1);
        }
        // Nothing was left in the dead-letter queue.
        expect((db.prepare("SELECT COUNT(*) AS n FROM outbox").get() as { n: number }).n).toBe(0);
        // Every answered decision's event reached the receiver, and a case.created for each case: at least once,
        // and a delivery made twice (a crash between sending and recording it) is the same event, by its id.
        const byId = new Map<string, string>();
        for (const event of received) {
          const text = JSON.stringify(event);
          expect(byId.get(event.id) ?? text, event.id).toBe(text);
          byId.set(event.id, text);
        }
        const decided = new Set(received.filter((e) => e.type.startsWith("decision.")).map((e) => e.data.evidenceId));
        const casesFor = new Set(received.filter((e) => e.type === "case.created").map((e) => e.data.case?.decisionId));
        for (const { evidenceId, score } of answered) {
          expect(decided.has(evidenceId), evidenceId).toBe(true);
          const decision = decisionOf.get(evidenceId) as { id: string };
          expect(casesFor.has(decision.id), evidenceId).toBe(score >= 80);
        }
      } finally {
        db.close();
      }
    } finally {
      second.child.kill("SIGTERM");
      await second.exited;
      receiver.close();
    }
  });
});
