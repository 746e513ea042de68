import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { RateLimitRuleSchema, RateLimitScope } from "../gen/fraud/v1/options_pb.js";
import { checkSharedRateLimits } from "../src/api/contract.js";
import { RateLimiter } from "../src/api/rate-limiter.js";
import { DecisionService, AnalyzeRequestSchema, AnalyzeResponseSchema } from "../gen/fraud/v1/decision_pb.js";
import { ManualClock } from "./helpers/clock.js";
import { seededRandom } from "./helpers/random.js";
import { grpcClient, grpcUnary } from "./helpers/grpc.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

describe("RateLimiter (sliding log)", () => {
  it("admits exactly the limit, then refuses with a Retry-After until the window has slid", () => {
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock);
    const check = [{ name: "decide", key: "k1", limit: 100, windowMs: 60_000 }];
    for (let i = 0; i < 100; i++) expect(limiter.consume(check).allowed).toBe(true);
    const refused = limiter.consume(check);
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterSeconds).toBeGreaterThan(0);
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(120);
    expect(refused.states[0]).toMatchObject({ name: "decide", limit: 100, remaining: 0 });
    // Another identity is unaffected.
    expect(limiter.consume([{ ...check[0]!, key: "k2" }]).allowed).toBe(true);
    clock.advance(refused.retryAfterSeconds * 1000);
    expect(limiter.consume(check).allowed).toBe(true);
  });

  it("never admits more than the limit in any window, even for a burst across a clock-minute boundary", () => {
    const clock = new ManualClock(50_000); // second :50 of the first minute
    const limiter = new RateLimiter(clock);
    const check = [{ name: "decide", key: "k", limit: 100, windowMs: 60_000 }];
    for (let i = 0; i < 100; i++) expect(limiter.consume(check).allowed).toBe(true);
    clock.advance(12_000); // second :02 of the next minute
    const refused = limiter.consume(check);
    expect(refused.allowed).toBe(false);
    // Exactly when the burst leaves the window, and not a second earlier.
    expect(refused.retryAfterSeconds).toBe(48);
    expect(refused.states[0]).toMatchObject({ remaining: 0, resetSeconds: 48 });
    clock.advance(47_999);
    expect(limiter.consume(check).allowed).toBe(false);
    clock.advance(1);
    let admitted = 0;
    while (limiter.consume(check).allowed) admitted++;
    expect(admitted).toBe(100);
  });

  it("takes back a call it counted, and only that one", () => {
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock);
    const check = [{ name: "t", key: "k", limit: 3, windowMs: 60_000 }];
    limiter.consume(check);
    clock.advance(10);
    const second = limiter.consume(check);
    clock.advance(10);
    limiter.consume(check);
    expect(limiter.consume(check).allowed).toBe(false);
    expect(limiter.release(check, second.admittedAt).states[0]).toMatchObject({ remaining: 1 });
    expect(limiter.consume(check).allowed).toBe(true);
    expect(limiter.consume(check).allowed).toBe(false);
    // The oldest call still frees the first place: 60 s after it, not after the one taken back.
    clock.advance(60_000 - 20);
    expect(limiter.consume(check).allowed).toBe(true);
  });

  it("admits a call exactly when fewer than the limit were admitted in the window before it", () => {
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock);
    const check = { name: "w", key: "k", limit: 7, windowMs: 1_000 };
    const admittedAt: number[] = [];
    const random = seededRandom(42);
    for (let i = 0; i < 5_000; i++) {
      clock.advance(Math.floor(random() * 120));
      const now = clock.now();
      const inWindow = admittedAt.filter((t) => t > now - check.windowMs).length;
      const outcome = limiter.consume([check]);
      expect(outcome.allowed).toBe(inWindow < check.limit);
      if (outcome.allowed) admittedAt.push(now);
      else {
        // The wait it announces is the first moment a call would be admitted.
        const freeAt = (admittedAt.filter((t) => t > now - check.windowMs)[inWindow - check.limit] as number) + check.windowMs;
        expect(outcome.retryAfterSeconds).toBe(Math.max(1, Math.ceil((freeAt - now) / 1000)));
      }
    }
    expect(admittedAt.length).toBeGreaterThan(1_000);
  });

  it("forgets the identities least recently used past its cap, and each identity's calls once they leave the window", () => {
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock, 3);
    // ip0 is dropped when the fourth identity arrives: its next call starts a new log.
    for (let i = 0; i < 10; i++) expect(limiter.consume([{ name: "analyze", key: `ip${i}`, limit: 1_000_000, windowMs: 60_000, evictable: true }]).allowed).toBe(true);
    const check = [{ name: "analyze", key: "ip0", limit: 1, windowMs: 60_000, evictable: true }];
    expect(limiter.consume(check).allowed).toBe(true);
    expect(limiter.consume(check).allowed).toBe(false);
    clock.advance(60_000);
    expect(limiter.consume(check).allowed).toBe(true);
  });

  it("keeps counting an identity that goes on calling while a flood of new ones passes its cap", () => {
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock, 100);
    const limited = [{ name: "analyze", key: "busy", limit: 2, windowMs: 60_000, evictable: true }];
    expect(limiter.consume(limited).allowed).toBe(true);
    expect(limiter.consume(limited).allowed).toBe(true);
    for (let i = 0; i < 5_000; i++) {
      limiter.consume([{ name: "analyze", key: `flood${i}`, limit: 30, windowMs: 60_000, evictable: true }]);
      // Still refused: its calls are used too recently to be the ones forgotten.
      if (i % 50 === 0) expect(limiter.consume(limited).allowed, `after ${i + 1} new identities`).toBe(false);
    }
  });

  it("never forgets a key's or an account's count to make room for client networks past its cap", () => {
    // Client networks are an unbounded set (an IPv6 /48 holds 65,536 /64s): a flood of them must not reset the
    // count of a key or an account that has used up its quota and waits, which would let it escape its limit.
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock, 3);
    const daily = [{ name: "feedback_daily", key: "acct_a/live", limit: 2, windowMs: 86_400_000 }];
    expect(limiter.consume(daily).allowed).toBe(true);
    expect(limiter.consume(daily).allowed).toBe(true);
    expect(limiter.consume(daily).allowed).toBe(false);
    for (let i = 0; i < 20; i++) limiter.consume([{ name: "analyze", key: `acct_b/live/2001:db8:0:${i.toString(16)}::/64`, limit: 30, windowMs: 60_000, evictable: true }]);
    clock.advance(3_600_000);
    expect(limiter.consume(daily).allowed).toBe(false);
  });

  it("counts a call only when every rule admits it", () => {
    const clock = new ManualClock(0);
    const limiter = new RateLimiter(clock);
    const hourly = { name: "hourly", key: "a", limit: 2, windowMs: 3_600_000 };
    const daily = { name: "daily", key: "a", limit: 3, windowMs: 86_400_000 };
    expect(limiter.consume([hourly, daily]).allowed).toBe(true);
    expect(limiter.consume([hourly, daily]).allowed).toBe(true);
    expect(limiter.consume([hourly, daily]).allowed).toBe(false);
    clock.advance(2 * 3_600_000);
    expect(limiter.consume([hourly, daily]).allowed).toBe(true);
    const refused = limiter.consume([hourly, daily]);
    expect(refused.allowed).toBe(false);
    expect(refused.states.find((s) => s.name === "daily")?.remaining).toBe(0);
  });
});

describe("rate limits over the API", () => {
  const clock = new ManualClock();
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ clock, env: { FRAUD_ANALYZE_RATE_LIMIT: "5" } });
  });
  afterAll(() => server.close());

  const decide = (key: string, headers: Record<string, string> = {}) =>
    fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key, ...headers },
      body: JSON.stringify({ userId: "u1", action: "login" }),
    });

  it("allows 100 decides per minute per key, then 429 with Retry-After and RateLimit headers", async () => {
    const { keys } = server.createAccount();
    for (let i = 0; i < 100; i++) {
      const res = await decide(keys.test.secret);
      await res.arrayBuffer();
      expect(res.status).not.toBe(429);
    }
    const refused = await decide(keys.test.secret);
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as { error: { code: string; details: { retryAfterSeconds: number } } };
    expect(body.error.code).toBe("RATE_LIMIT_EXCEEDED");
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(body.error.details.retryAfterSeconds).toBe(retryAfter);
    expect(refused.headers.get("ratelimit-policy")).toBe('"decide";q=100;w=60');
    expect(refused.headers.get("ratelimit")).toMatch(/^"decide";r=0;t=\d+$/);
    // The other key of the same account has its own budget.
    expect((await decide(keys.test.publishable)).status).not.toBe(429);
    clock.advance(retryAfter * 1000);
    expect((await decide(keys.test.secret)).status).not.toBe(429);
  });

  it("says in t when a counted call next leaves the window, 0 when none is counted", async () => {
    const { keys } = server.createAccount();
    const first = await decide(keys.test.secret);
    expect(first.headers.get("ratelimit")).toBe('"decide";r=99;t=60');
    clock.advance(18_000);
    const second = await decide(keys.test.secret);
    expect(second.headers.get("ratelimit")).toBe('"decide";r=98;t=42');
    clock.advance(42_000);
    // The first left the window: one counted, freed 18 s from now.
    expect((await decide(keys.test.secret)).headers.get("ratelimit")).toBe('"decide";r=98;t=18');
  });

  it("honours an account's own decide limit", async () => {
    const { keys } = server.createAccount("Small", { decide: 3 });
    for (let i = 0; i < 3; i++) expect((await decide(keys.live.secret)).status).not.toBe(429);
    const refused = await decide(keys.live.secret);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit-policy")).toBe('"decide";q=3;w=60');
  });

  it("does not count an invalid call, and counts one the handler refuses, telling it what is left", async () => {
    const { keys } = server.createAccount("Careless", { decide: 3 });
    const invalid = (body: unknown) =>
      fetch(`${server.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": keys.live.secret }, body: JSON.stringify(body) });
    for (const body of [{ userId: "u1" }, { userId: "u1", action: "login", amount: -1 }]) {
      const refused = await invalid(body);
      expect(refused.status).toBe(400);
      expect(refused.headers.get("ratelimit")).toBeNull();
    }
    for (let i = 0; i < 3; i++) expect((await decide(keys.live.secret)).status).toBe(200);
    expect((await decide(keys.live.secret)).status).toBe(429);
    // Feedback on a decision that does not exist passes validation, so it counts, and its 404 says so.
    const feedback = () =>
      fetch(`${server.url}/api/v1/feedback`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.live.secret },
        body: JSON.stringify({ decisionId: "dec_0Vbc00000000000000000000", actualOutcome: "fraud" }),
      });
    const first = await feedback();
    expect(first.status).toBe(404);
    expect(first.headers.get("ratelimit")).toMatch(/^"feedback_hourly";r=49;t=\d+, "feedback_daily";r=199;t=\d+$/);
    expect((await feedback()).headers.get("ratelimit")).toMatch(/^"feedback_hourly";r=48;/);
  });

  it("tells a counted call that fails with a server error what is left, as it tells every other counted answer", async () => {
    const { account, keys } = server.createAccount("Broken");
    // The account's hashing key gone: analyze cannot derive the visitor id and fails inside its handler.
    server.app.db.prepare("UPDATE accounts SET hash_key = NULL WHERE id = ?").run(account.id);
    const res = await fetch(`${server.url}/api/v1/analyze`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": keys.live.publishable },
      body: JSON.stringify({ action: "login" }),
    });
    expect(res.status).toBe(500);
    expect(res.headers.get("ratelimit-policy")).toBe('"analyze";q=5;w=60');
    expect(res.headers.get("ratelimit")).toMatch(/^"analyze";r=4;t=60$/);
  });

  it("limits analyze per client IP within an account and environment, raised or lowered by FRAUD_ANALYZE_RATE_LIMIT, also over gRPC", async () => {
    const { keys } = server.createAccount();
    const other = server.createAccount().keys;
    const analyze = (key: string) =>
      fetch(`${server.url}/api/v1/analyze`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key },
        body: JSON.stringify({ action: "login" }),
      });
    // Another account's calls from the same address, with its publishable key, use none of this account's quota.
    for (let i = 0; i < 5; i++) expect((await analyze(other.test.publishable)).status).toBe(200);
    expect((await analyze(other.test.publishable)).status).toBe(429);
    for (let i = 0; i < 5; i++) expect((await analyze(i % 2 ? keys.test.publishable : keys.test.secret)).status).toBe(200);
    // Per IP, whatever the key of the account and environment; the live environment counts on its own.
    expect((await analyze(keys.test.publishable)).status).toBe(429);
    expect((await analyze(keys.live.publishable)).status).toBe(200);
    const client = grpcClient(server.port);
    try {
      const result = await grpcUnary(client, DecisionService, "Analyze", AnalyzeRequestSchema, AnalyzeResponseSchema, { action: "login" }, { "x-api-key": keys.test.secret });
      expect(result.error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(result.trailers?.get("fraud-error-code")).toEqual(["RATE_LIMIT_EXCEEDED"]);
      expect(Number(result.trailers?.get("retry-after")[0])).toBeGreaterThan(0);
    } finally {
      client.close();
    }
    clock.advance(120_000);
  });

  it("allows 30 analyzes per 60 s per IP without FRAUD_ANALYZE_RATE_LIMIT (part 8), then again once the window has passed", async () => {
    const defaults = await startTestServer({ clock });
    try {
      const { keys } = defaults.createAccount();
      const analyze = () =>
        fetch(`${defaults.url}/api/v1/analyze`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": keys.test.publishable },
          body: JSON.stringify({ action: "login" }),
        });
      for (let i = 0; i < 30; i++) {
        const res = await analyze();
        await res.arrayBuffer();
        expect(res.status, `analyze ${i + 1}`).toBe(200);
      }
      const refused = await analyze();
      expect(refused.status).toBe(429);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("RATE_LIMIT_EXCEEDED");
      expect(refused.headers.get("ratelimit-policy")).toBe('"analyze";q=30;w=60');
      expect(Number(refused.headers.get("retry-after"))).toBeLessThanOrEqual(60);
      clock.advance(59_999);
      expect((await analyze()).status).toBe(429);
      clock.advance(1);
      expect((await analyze()).status).toBe(200);
    } finally {
      await defaults.close();
      clock.advance(120_000);
    }
  });

  it("limits analyze per IPv6 /64, since a host can send from any address of its prefix", async () => {
    const proxied = await startTestServer({ clock, env: { FRAUD_ANALYZE_RATE_LIMIT: "5", FRAUD_TRUSTED_PROXIES: "127.0.0.1" } });
    try {
      const { keys } = proxied.createAccount();
      const analyze = (client: string) =>
        fetch(`${proxied.url}/api/v1/analyze`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": keys.test.secret, "x-forwarded-for": client },
          body: JSON.stringify({ action: "login" }),
        });
      // Five addresses of one /64, as privacy addresses rotate: one client, one limit.
      for (let i = 1; i <= 5; i++) expect((await analyze(`2001:db8:1:2::${i.toString(16)}`)).status).toBe(200);
      expect((await analyze("2001:db8:1:2:ffff::99")).status).toBe(429);
      // The next /64 is another client; IPv4 addresses are counted one by one.
      expect((await analyze("2001:db8:1:3::1")).status).toBe(200);
      for (let i = 1; i <= 5; i++) expect((await analyze(`81.2.69.${i}`)).status).toBe(200);
    } finally {
      await proxied.close();
    }
  });
});

describe("a limit declared on several RPCs under one name", () => {
  const rule = (limit: number) => create(RateLimitRuleSchema, { name: "policy_compiles", scope: RateLimitScope.ACCOUNT, limit, windowSeconds: 60, countsRefused: true });

  it("must say the same on each, since they share one window", () => {
    expect(() => checkSharedRateLimits([{ rpc: "A", rule: rule(120) }, { rpc: "B", rule: rule(120) }])).not.toThrow();
    expect(() => checkSharedRateLimits([{ rpc: "A", rule: rule(120) }, { rpc: "B", rule: rule(60) }])).toThrow("rate limit policy_compiles is declared differently on A and B");
  });
});
