import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { DecisionService, DecideRequestSchema, DecideResponseSchema } from "../gen/fraud/v1/decision_pb.js";
import { grpcClient, grpcUnary } from "./helpers/grpc.js";
import { HUMAN_DESKTOP, UK_IP } from "./helpers/inputs.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

// One engine thread whose every store read takes 800 ms, and room for two evaluations: two decides fill
// the engine for over a second, long enough for the requests sent beside them to find it full. Analyze's
// per-IP limit is lifted.
const STORE_LATENCY_MS = 800;

let server: TestServer;
let secret: string;

beforeAll(async () => {
  server = await startTestServer({ config: { engineThreads: 1, engineQueueLimit: 2, comprehensiveBudgetMs: 10_000, rateLimitOverrides: { analyze: 1_000_000 } }, storeLatencyMs: STORE_LATENCY_MS });
  secret = server.createAccount("Flooded").keys.test.secret;
});
afterAll(async () => {
  await server.close();
});

async function post(path: string, body: Record<string, unknown>, target = { url: server.url, key: secret }) {
  const res = await fetch(`${target.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": target.key },
    body: JSON.stringify(body),
  });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), rateLimit: res.headers.get("ratelimit"), body: (await res.json()) as unknown };
}

const decide = (userId: string) => post("/api/v1/decide", { userId, action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
const decisionCount = () => (server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get() as { n: number }).n;

describe("a decide past its budget", () => {
  it("takes its fast-path answer without a second place in the queue: a queue of one serves decides one at a time", async () => {
    // The comprehensive path always misses (every store read takes 200 ms, the budget is 0 ms), and the
    // queue holds one evaluation: the decide's own, whose fallback must not be refused as a second one.
    const strict = await startTestServer({ config: { engineThreads: 1, engineQueueLimit: 1, comprehensiveBudgetMs: 0 }, storeLatencyMs: 200 });
    try {
      const key = strict.createAccount("Strict").keys.test.secret;
      for (let i = 0; i < 3; i++) {
        const answer = await post("/api/v1/decide", { userId: `sequential_${i}`, action: "login", ip: UK_IP, ...HUMAN_DESKTOP }, { url: strict.url, key });
        expect(answer.status, JSON.stringify(answer.body)).toBe(200);
        // Its comprehensive evaluation finishes later; the next decide waits for the queue to be empty again.
        await expect.poll(async () => Number(/^fraud_engine_queue (\d+)$/m.exec(await (await fetch(`${strict.url}/api/metrics`)).text())?.[1]), { timeout: 5_000, interval: 20 }).toBe(0);
      }
    } finally {
      await strict.close();
    }
  });

  it("leaves the queue's other place free while its fallback waits behind the comprehensive evaluation", async () => {
    // One thread, busy 300 ms with A's comprehensive reads: A's fast fallback waits behind them. A holds one
    // of the two places; B, arriving meanwhile, takes the other.
    const pair = await startTestServer({ config: { engineThreads: 1, engineQueueLimit: 2, comprehensiveBudgetMs: 0 }, storeLatencyMs: 300 });
    try {
      const key = pair.createAccount("Pair").keys.test.secret;
      const queued = async () => Number(/^fraud_engine_queue (\d+)$/m.exec(await (await fetch(`${pair.url}/api/metrics`)).text())?.[1]);
      const first = post("/api/v1/decide", { userId: "pair_a", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }, { url: pair.url, key });
      await expect.poll(queued, { timeout: 5_000, interval: 5 }).toBeGreaterThan(0);
      expect(await queued()).toBe(1);
      const second = await post("/api/v1/decide", { userId: "pair_b", action: "login", ip: UK_IP, ...HUMAN_DESKTOP }, { url: pair.url, key });
      expect(second.status, JSON.stringify(second.body)).toBe(200);
      expect((await first).status).toBe(200);
    } finally {
      await pair.close();
    }
  });
});

describe("a full engine queue", () => {
  it("refuses the decides past it with 503 and Retry-After, records none of them, and serves again once drained", async () => {
    const before = decisionCount();
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => decide(`flood_${i}`)));
    const accepted = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status !== 200);
    expect(accepted).toHaveLength(2);
    expect(refused).toHaveLength(4);
    for (const answer of refused) {
      expect(answer.status).toBe(503);
      expect(answer.retryAfter).toBe("1");
      expect(answer.body).toMatchObject({ success: false, error: { code: "SERVICE_UNAVAILABLE", message: expect.stringMatching(/engine's queue is full/), details: { retryAfterSeconds: 1 } } });
      // Turned away before any work: not counted against the key's limit, and the answer says what is left.
      expect(answer.rateLimit).toMatch(/^"decide";r=\d+;t=\d+$/);
    }
    await server.app.settled();
    expect(decisionCount()).toBe(before + 2);
    const after = await decide("after_flood");
    expect(after.status).toBe(200);
    // The two accepted and this one: the four refused used up nothing.
    expect(after.rateLimit).toMatch(/^"decide";r=97;/);
    expect(server.logs.some((line) => line.includes("unhandled error"))).toBe(false);
  });

  it("refuses analyze and gRPC decide the same way while decides fill it, and shows the queue in the metrics", async () => {
    const filling = Promise.all([decide("filler_1"), decide("filler_2")]);
    // Once both decides are in the engine (its queue gauge says so), it is full.
    const queued = async () => Number(/^fraud_engine_queue (\d+)$/m.exec(await (await fetch(`${server.url}/api/metrics`)).text())?.[1]);
    await expect.poll(queued, { timeout: 5_000, interval: 10 }).toBe(2);
    const analyzed = await post("/api/v1/analyze", { action: "login", ip: UK_IP, ...HUMAN_DESKTOP });
    expect(analyzed.status).toBe(503);
    expect(analyzed.body).toMatchObject({ success: false, error: { code: "SERVICE_UNAVAILABLE" } });
    const client = grpcClient(server.port);
    try {
      const grpcAnswer = await grpcUnary(client, DecisionService, "Decide", DecideRequestSchema, DecideResponseSchema, { userId: "grpc_flood", action: "login", ip: UK_IP }, { "x-api-key": secret });
      expect(grpcAnswer.error?.code).toBe(grpc.status.UNAVAILABLE);
      expect(grpcAnswer.error?.metadata.get("fraud-error-code")).toEqual(["SERVICE_UNAVAILABLE"]);
    } finally {
      client.close();
    }
    expect((await filling).map((a) => a.status)).toEqual([200, 200]);
    expect(await queued()).toBe(0);
  });
});

describe("a full backtest queue", () => {
  const draft = { name: "draft", rules: [{ condition: "score >= 10", action: "deny" }] };

  it("refuses the backtest past one running and 16 waiting with 503", async () => {
    // Each backtest holds the thread for 300 ms: the 18 sent together all arrive before the first is done.
    const backtests = await startTestServer({ storeLatencyMs: 300 });
    // Two from each of nine accounts: each account within its own share of the queue.
    const targets = Array.from({ length: 9 }, (_, i) => ({ url: backtests.url, key: backtests.createAccount(`Tuner ${i}`).keys.test.secret }));
    const answers = await Promise.all(targets.flatMap((target) => [target, target]).map((target) => post("/api/v1/policies/backtest", draft, target))).finally(() => backtests.close());
    expect(answers.filter((a) => a.status === 200)).toHaveLength(17);
    const refused = answers.filter((a) => a.status !== 200);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ status: 503, retryAfter: "1", body: { error: { code: "SERVICE_UNAVAILABLE", message: expect.stringMatching(/backtest queue is full/) } } });
  });

  it("holds an account to two backtests running or waiting, so one account cannot fill the queue for all", async () => {
    const backtests = await startTestServer({ storeLatencyMs: 300 });
    try {
      const busy = { url: backtests.url, key: backtests.createAccount("Busy").keys.test.secret };
      const other = { url: backtests.url, key: backtests.createAccount("Other").keys.test.secret };
      const answers = await Promise.all([busy, busy, busy, other].map((target) => post("/api/v1/policies/backtest", draft, target)));
      expect(answers.map((a) => a.status)).toEqual([200, 200, 503, 200]);
      expect(answers[2]).toMatchObject({ retryAfter: "5", body: { error: { code: "SERVICE_UNAVAILABLE", message: expect.stringMatching(/already has 2 backtests running or waiting in this environment: retry in 5 seconds$/) } } });
      // It compiled its rules before it was turned away: the compile limit keeps it, as it keeps a refusal.
      expect(answers[2]?.rateLimit).toMatch(/^"policy_compiles";r=117;/);
      // Once they are done, the account may backtest again.
      const again = await post("/api/v1/policies/backtest", draft, busy);
      expect(again.status).toBe(200);
      expect(again.rateLimit).toMatch(/^"policy_compiles";r=116;/);
    } finally {
      await backtests.close();
    }
  });
});
