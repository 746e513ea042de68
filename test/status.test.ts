import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WRITE_FAILURE_HOLD_MS } from "../src/decisions/writer.js";
import { ManualClock } from "./helpers/clock.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

let server: TestServer;
let keys: ReturnType<TestServer["createAccount"]>["keys"];

beforeAll(async () => {
  server = await startTestServer();
  keys = server.createAccount().keys;
});
afterAll(() => server.close());

interface StatusBody {
  success: boolean;
  data: {
    status: string;
    uptime: string;
    lastUpdated: string;
    components: Array<{ name: string; status: string; metrics?: { latencyP50Ms: number; latencyP99Ms: number; requestCount: number; successCount: number; failureCount: number; detail: string } }>;
  };
  meta: { requestId: string; latencyMs: number };
}

async function status(query: string, key?: string): Promise<{ code: number; body: StatusBody }> {
  const res = await fetch(`${server.url}/api/v1/status${query}`, { headers: key ? { "x-api-key": key } : {} });
  return { code: res.status, body: (await res.json()) as StatusBody };
}

describe("GET /api/v1/status", () => {
  it("answers the public report without a key, in the envelope", async () => {
    const { code, body } = await status("?public=true");
    expect(code).toBe(200);
    expect(body.success).toBe(true);
    expect(body.data.status).toBe("operational");
    expect(body.data.uptime).toMatch(/^\d{1,3}\.\d{2}%$/);
    expect(new Date(body.data.lastUpdated).toISOString()).toBe(body.data.lastUpdated);
    expect(body.data.components).toEqual([
      { name: "API Edge", status: "operational" },
      { name: "API Node", status: "operational" },
      { name: "Dashboard", status: "operational" },
      { name: "Data Sync", status: "operational" },
    ]);
    expect(body.meta.requestId).toMatch(/^req_/);
    expect(typeof body.meta.latencyMs).toBe("number");
  });

  it("adds per-component latency and request counts for a secret key, from real counters", async () => {
    await fetch(`${server.url}/api/v1/cases`, { headers: { "x-api-key": keys.test.secret } });
    await fetch(`${server.url}/api/v1/policies`, { headers: { "x-api-key": keys.test.secret } });
    const { body } = await status("", keys.test.secret);
    const edge = body.data.components.find((c) => c.name === "API Edge");
    expect(edge?.metrics?.requestCount).toBeGreaterThanOrEqual(2);
    expect(edge?.metrics?.successCount).toBe(edge?.metrics?.requestCount);
    expect(edge?.metrics?.failureCount).toBe(0);
    expect(edge?.metrics?.latencyP99Ms).toBeGreaterThanOrEqual(edge?.metrics?.latencyP50Ms ?? 0);
    const dashboard = body.data.components.find((c) => c.name === "Dashboard");
    expect(dashboard?.metrics?.requestCount).toBeGreaterThanOrEqual(1);
    const dataSync = body.data.components.find((c) => c.name === "Data Sync");
    expect(dataSync?.metrics?.detail).toMatch(/database ok; 0 pending background tasks/);
  });

  it("gives publishable keys and public=true the public report only", async () => {
    for (const [query, key] of [["", keys.test.publishable], ["?public=true", keys.test.secret]] as const) {
      const { code, body } = await status(query, key);
      expect(code).toBe(200);
      expect(body.data.components.every((c) => c.metrics === undefined)).toBe(true);
    }
  });

  it("needs a key unless public=true asks for the public report (part 5: every operation but the public status needs one)", async () => {
    for (const query of ["", "?public=false"]) {
      const res = await fetch(`${server.url}/api/v1/status${query}`);
      expect(res.status, query).toBe(401);
      const body = (await res.json()) as { success: boolean; error: { code: string; message: string } };
      expect(body.success).toBe(false);
      expect(body.error.code).toBe("UNAUTHORIZED");
      expect(body.error.message).toMatch(/public=true/);
    }
    expect((await status("?public=true")).code).toBe(200);
  });

  it("refuses an invalid key even where no key is needed", async () => {
    const { code } = await status("?public=true", "sk_test_notAValidKeyAtAll00000000000000");
    expect(code).toBe(401);
  });

  it("reports an unhealthy database as an outage of Data Sync and fails readiness", async () => {
    const broken = await startTestServer();
    try {
      broken.app.db.close();
      const res = await fetch(`${broken.url}/api/v1/status?public=true`);
      const body = (await res.json()) as StatusBody;
      expect(body.data.status).toBe("outage");
      expect(body.data.components.find((c) => c.name === "Data Sync")?.status).toBe("outage");
      const health = await fetch(`${broken.url}/api/health`);
      expect(health.status).toBe(503);
      expect(((await health.json()) as { ready: boolean }).ready).toBe(false);
      expect((await fetch(`${broken.url}/api/health/live`)).status).toBe(200);
    } finally {
      // Shutting down goes through every step, the threads stop, and what failed on the way is logged.
      await broken.close();
    }
    expect(broken.logs.some((line) => line.includes("shutdown step failed") && line.includes('"step":"outbox"'))).toBe(true);
  });
});

describe("a backlog of background tasks", () => {
  it("degrades Data Sync but leaves the server ready; probes count in no component, whatever they answer", async () => {
    const backlogged = await startTestServer();
    try {
      const { keys: own } = backlogged.createAccount();
      const uptime = async () => {
        const report = await fetch(`${backlogged.url}/api/v1/status`, { headers: { "x-api-key": own.test.secret } });
        return ((await report.json()) as StatusBody).data;
      };
      // Ten thousand deliveries waiting for a receiver that is down (due next year, so none runs meanwhile).
      backlogged.app.db
        .prepare(
          `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
           INSERT INTO outbox (kind, account_id, environment, payload, status, next_attempt_at, created_at, updated_at)
           SELECT 'webhook.deliver', 'acct_x', 'test', '{}', 'pending', @later, @now, @now FROM n`,
        )
        .run({ later: Date.now() + 365 * 86_400_000, now: Date.now() });
      const health = await fetch(`${backlogged.url}/api/health`);
      expect(health.status).toBe(200);
      const body = (await health.json()) as { ready: boolean; checks: Array<{ name: string; ok: boolean; detail: string }> };
      expect(body.ready).toBe(true);
      expect(body.checks.find((check) => check.name === "background")).toEqual({ name: "background", ok: false, detail: "10000 pending background tasks" });
      expect((await uptime()).components.find((c) => c.name === "Data Sync")?.status).toBe("degraded");

      // A server that is not ready answers its probes 503: not a failure of the service, nor a request of its users.
      const before = (await uptime()).components.find((c) => c.name === "API Edge")?.metrics?.requestCount ?? 0;
      backlogged.app.health.markDraining();
      for (let i = 0; i < 20; i++) expect((await fetch(`${backlogged.url}/api/health/ready`)).status).toBe(503);
      // Nor do the gRPC health service's probes (here over Connect JSON).
      for (let i = 0; i < 5; i++) {
        const check = await fetch(`${backlogged.url}/grpc.health.v1.Health/Check`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
        expect(await check.json()).toEqual({ status: "NOT_SERVING" });
      }
      const after = await uptime();
      expect(after.uptime).toBe("100.00%");
      const edge = after.components.find((c) => c.name === "API Edge");
      expect(edge?.status).toBe("operational");
      // Neither the probes nor the status calls themselves count.
      expect(edge?.metrics?.requestCount).toBe(before);
      expect(edge?.metrics?.failureCount).toBe(0);
      const metrics = await (await fetch(`${backlogged.url}/api/metrics`)).text();
      expect(metrics).toMatch(/fraud_requests_total\{route="\/api\/health\/ready",protocol="rest",outcome="success",code="NOT_READY"\} 20/);
      expect(backlogged.logs.filter((line) => line.includes('"route":"/api/health/ready"')).every((line) => line.includes('"level":"info"'))).toBe(true);
      // Probes are read with GET.
      const posted = await fetch(`${backlogged.url}/api/health`, { method: "POST" });
      expect(posted.status).toBe(405);
      expect(posted.headers.get("allow")).toBe("GET, HEAD");
      expect((await fetch(`${backlogged.url}/api/metrics`, { method: "DELETE" })).status).toBe(405);
    } finally {
      await backlogged.close();
    }
  });
});

describe("a store that reads but refuses every write", () => {
  it("fails readiness and reports Data Sync as an outage while decides cannot be stored, and recovers with the first one stored", async () => {
    const clock = new ManualClock();
    const failing = await startTestServer({ clock });
    const { keys: own } = failing.createAccount();
    const db = failing.app.db;
    const decide = () => fetch(`${failing.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": own.test.secret },
      body: JSON.stringify({ userId: "disk_full", action: "login", ip: "81.2.69.160" }),
    });
    const ready = async () => (await fetch(`${failing.url}/api/health/ready`)).status;
    const dataSync = async () => ((await (await fetch(`${failing.url}/api/v1/status?public=true`)).json()) as StatusBody).data.components.find((c) => c.name === "Data Sync")?.status;
    try {
      // What a full disk does to the writer, for every connection: its reads still work, its inserts fail.
      db.exec("CREATE TRIGGER disk_full BEFORE INSERT ON decisions BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;");
      expect((await decide()).status).toBe(500);
      const health = await fetch(`${failing.url}/api/health`);
      expect(health.status).toBe(503);
      const body = (await health.json()) as { ready: boolean; checks: Array<{ name: string; ok: boolean; detail: string }> };
      expect(body.ready).toBe(false);
      expect(body.checks.find((check) => check.name === "database")).toEqual({ name: "database", ok: false, detail: "writes failing: database or disk is full" });
      expect(await dataSync()).toBe("outage");

      // A balancer sends a server that is not ready no decides: after a while it says it is ready again without
      // one, and if the store still refuses, the next decide says so again.
      clock.advance(WRITE_FAILURE_HOLD_MS - 1);
      expect(await ready()).toBe(503);
      clock.advance(1);
      expect(await ready()).toBe(200);
      expect((await decide()).status).toBe(500);
      expect(await ready()).toBe(503);
      // A clock stepped back does not stretch the hold.
      clock.advance(-3_600_000);
      expect(await ready()).toBe(200);
      clock.advance(3_600_000);

      // Two decides of two failed: API Node is an outage, and uptime says so. Neither a keyless client's
      // refused calls, nor unknown paths, nor the status report's own polls, can make up for that.
      const report = async () => ((await (await fetch(`${failing.url}/api/v1/status`, { headers: { "x-api-key": own.test.secret } })).json()) as StatusBody).data;
      const hidden = await report();
      expect(hidden.components.find((c) => c.name === "API Node")?.status).toBe("outage");
      for (let i = 0; i < 60; i++) {
        await fetch(`${failing.url}/api/v1/decide`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": "sk_live_not_a_key_at_all_0000" }, body: "{}" });
        await fetch(`${failing.url}/api/v1/no-such-endpoint/${i}`);
        await fetch(`${failing.url}/api/v1/status?public=true`);
      }
      const after = await report();
      expect(after.uptime).toBe(hidden.uptime);
      expect(after.components.map((c) => [c.name, c.status])).toEqual(hidden.components.map((c) => [c.name, c.status]));

      // The store takes writes again: the first decide stored clears it at once.
      db.exec("DROP TRIGGER disk_full");
      expect((await decide()).status).toBe(200);
      expect(await ready()).toBe(200);
      expect(await dataSync()).toBe("operational");
    } finally {
      await failing.close();
    }
  });
});

describe("diagnostics", () => {
  it("serves Prometheus metrics with counts and latency by route", async () => {
    const text = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(text).toMatch(/# TYPE fraud_requests_total counter/);
    expect(text).toMatch(/fraud_requests_total\{route="GET \/api\/v1\/status",protocol="rest",outcome="success",code="OK"\} \d+/);
    expect(text).toMatch(/fraud_request_duration_seconds_bucket\{route="GET \/api\/v1\/status",le="\+Inf"\} \d+/);
    expect(text).toMatch(/fraud_ready 1/);
  });

  it("names a method it does not know OTHER, so that invented HTTP/2 methods add no metric series and no long log lines", async () => {
    const session = http2.connect(server.url);
    try {
      const paths = ["/api/v1/cases", "/fraud.v1.DecisionService/Decide", "/api/v1/events/stream"];
      for (let i = 0; i < 20; i++) {
        for (const path of paths) {
          const stream = session.request({ ":method": `INVENTED${i}${"X".repeat(2_000)}`, ":path": path });
          stream.resume();
          await new Promise<void>((resolve) => stream.on("close", () => resolve()));
        }
      }
    } finally {
      session.close();
    }
    const text = await (await fetch(`${server.url}/api/metrics`)).text();
    expect(text).not.toContain("INVENTED");
    expect(text).toContain('fraud_request_duration_seconds_count{route="OTHER /api/v1/cases"} 20');
    expect(text).toContain('fraud_request_duration_seconds_count{route="OTHER /fraud.v1.DecisionService/Decide"} 20');
    expect(text).toContain('fraud_request_duration_seconds_count{route="OTHER /api/v1/events/stream"} 20');
    expect(server.logs.filter((line) => line.includes("INVENTED"))).toEqual([]);
  });

  it("serves /api/health with the database check", async () => {
    const res = await fetch(`${server.url}/api/health`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { status: string; live: boolean; ready: boolean; checks: Array<{ name: string; ok: boolean }> };
    expect(body).toMatchObject({ status: "ok", live: true, ready: true });
    expect(body.checks.find((c) => c.name === "database")?.ok).toBe(true);
  });
});
