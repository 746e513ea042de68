// anomaly.detected (deny_rate_spike) from real decisions.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ANOMALY_COOL_DOWN_MS, ANOMALY_WINDOW } from "../../src/webhooks/anomaly.js";
import type { WebhookEvent } from "../../src/webhooks/events.js";
import { ManualClock } from "../helpers/clock.js";
import { HUMAN_DESKTOP, UK_IP, botAttack } from "../helpers/inputs.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

const clock = new ManualClock();
let server: TestServer;
const anomalies: Array<WebhookEvent<"anomaly.detected">> = [];

beforeAll(async () => {
  server = await startTestServer({ clock });
  server.app.events.addSink({
    wants: (_tenant, type) => type === "anomaly.detected",
    deliver: (_tenant, event) => {
      anomalies.push(event as WebhookEvent<"anomaly.detected">);
    },
  });
});
afterAll(() => server.close());

async function decide(key: string, deny: boolean, times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const body = deny ? { userId: `bot_${i}`, action: "signup", ...botAttack("185.220.101.45") } : { userId: `user_${i}`, action: "login", ip: UK_IP, ...HUMAN_DESKTOP };
    const res = await fetch(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
    expect(((await res.json()) as { data: { decision: string } }).data.decision === "deny").toBe(deny);
  }
  await server.app.settled();
}

describe("anomaly.detected", () => {
  it("fires when half of the last 50 decisions are denies, 30 points above the 50 before, then cools down for an hour", async () => {
    const acme = server.createAccount("Acme", { decide: 1000 });
    const key = acme.keys.test.secret;
    await decide(key, false, 2 * ANOMALY_WINDOW - 25);
    await decide(key, true, 24);
    expect(anomalies).toHaveLength(0);
    await decide(key, true, 1);
    expect(anomalies).toHaveLength(1);
    expect(anomalies[0]).toMatchObject({
      environment: "test",
      accountId: acme.account.id,
      data: {
        kind: "deny_rate_spike",
        severity: "low",
        metrics: { windowDecisions: 50, denies: 25, denyRate: 0.5, baselineDenyRate: 0 },
        windowEnd: new Date(clock.now()).toISOString(),
      },
    });
    expect(anomalies[0]?.data.anomalyId).toMatch(/^anm_/);

    // Cool-down: more denies within the hour raise nothing.
    await decide(key, true, 10);
    expect(anomalies).toHaveLength(1);
    clock.advance(ANOMALY_COOL_DOWN_MS);
    await decide(key, true, 1);
    expect(anomalies).toHaveLength(2);
    expect(anomalies[1]?.data).toMatchObject({ severity: "medium", metrics: { denies: 36, baselineDenyRate: 0 } });

    // Another account's steady denies are its own baseline: nothing fires for it.
    const globex = server.createAccount("Globex", { decide: 1000 });
    await decide(globex.keys.test.secret, true, 2 * ANOMALY_WINDOW);
    expect(anomalies).toHaveLength(2);
  }, 60_000);

  it("fires at a jump of exactly 30 points, counted in whole decisions (35 of 50 against 20 of 50), and not at 29", async () => {
    const before = anomalies.length;
    /** A fresh account's two windows: `previous` denies of 50, then `latest` denies of 50, the allows first in each. */
    const windows = async (name: string, previous: number, latest: number) => {
      const key = server.createAccount(name, { decide: 1000 }).keys.test.secret;
      for (const denies of [previous, latest]) {
        await decide(key, false, ANOMALY_WINDOW - denies);
        await decide(key, true, denies);
      }
    };
    await windows("Exact", 20, 35);
    expect(anomalies.slice(before)).toHaveLength(1);
    expect(anomalies.at(-1)?.data.metrics).toMatchObject({ denies: 35, denyRate: 0.7, baselineDenyRate: 0.4 });
    await windows("Short", 20, 34);
    expect(anomalies.slice(before)).toHaveLength(1);
  }, 60_000);
});
