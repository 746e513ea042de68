// The gRPC health service's Watch needs no key (probers use it): what one client can hold with it is bounded.
import { getEventListeners } from "node:events";
import fs from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { Code, ConnectError, createHandlerContext } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { Health, HealthCheckRequestSchema, HealthCheckResponse_ServingStatus as ServingStatus } from "../gen/health/v1/health_pb.js";
import { HealthMonitor } from "../src/observability/health.js";
import { createHealthService } from "../src/services/health.js";
import { openDatabase } from "../src/store/database.js";
import { tempDir } from "./helpers/server.js";

const dir = tempDir();
const db = openDatabase(dir);
afterAll(() => {
  db.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function watchContext() {
  return createHandlerContext({ service: Health, method: Health.method.watch, protocolName: "grpc", requestMethod: "POST", url: "http://localhost/grpc.health.v1.Health/Watch" });
}

describe("grpc.health.v1.Health/Watch", () => {
  it("ends by itself after its lifetime, holding one abort listener at a time however many polls it made", async () => {
    const service = createHealthService(new HealthMonitor(db), [], { pollMs: 5, lifetimeMs: 200, maxWatches: 4 });
    const ctx = watchContext();
    const statuses: ServingStatus[] = [];
    const started = performance.now();
    const ownListeners = getEventListeners(ctx.signal, "abort").length;
    let mostListeners = 0;
    const sampler = setInterval(() => (mostListeners = Math.max(mostListeners, getEventListeners(ctx.signal, "abort").length)), 2);
    for await (const response of service.watch(create(HealthCheckRequestSchema, { service: "" }), ctx)) statuses.push(response.status ?? ServingStatus.UNKNOWN);
    clearInterval(sampler);
    expect(statuses).toEqual([ServingStatus.SERVING]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(195);
    // About 40 polls: before, each one added a listener that stayed until the stream ended.
    expect(mostListeners).toBeLessThanOrEqual(ownListeners + 1);
    expect(getEventListeners(ctx.signal, "abort").length).toBeLessThanOrEqual(ownListeners);
  });

  it("refuses a watch past the limit open at once with RESOURCE_EXHAUSTED, and takes one again once another ends", async () => {
    const service = createHealthService(new HealthMonitor(db), [], { pollMs: 5, lifetimeMs: 60_000, maxWatches: 2 });
    const request = create(HealthCheckRequestSchema, { service: "" });
    const contexts = [watchContext(), watchContext()];
    const open = contexts.map((ctx) => service.watch(request, ctx)[Symbol.asyncIterator]());
    for (const watch of open) expect((await watch.next()).value).toEqual({ status: ServingStatus.SERVING });
    const refused = service.watch(request, watchContext())[Symbol.asyncIterator]();
    const error = await refused.next().then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.ResourceExhausted);

    // The client of the first one leaves: its watch ends (canceled), and its place is free.
    contexts[0]?.abort();
    await expect(open[0]?.next()).rejects.toMatchObject({ code: Code.Canceled });
    const again = service.watch(request, watchContext())[Symbol.asyncIterator]();
    expect((await again.next()).value).toEqual({ status: ServingStatus.SERVING });
    contexts[1]?.abort();
    await expect(open[1]?.next()).rejects.toMatchObject({ code: Code.Canceled });
    await again.return?.(undefined);
  });

  it("ends a watch whose deadline passed with DEADLINE_EXCEEDED, not as a stream that ended well", async () => {
    const service = createHealthService(new HealthMonitor(db), [], { pollMs: 1_000, lifetimeMs: 60_000, maxWatches: 4 });
    const ctx = createHandlerContext({ service: Health, method: Health.method.watch, protocolName: "grpc", requestMethod: "POST", url: "http://localhost/", timeoutMs: 50 });
    const watch = service.watch(create(HealthCheckRequestSchema, { service: "" }), ctx)[Symbol.asyncIterator]();
    expect((await watch.next()).value).toEqual({ status: ServingStatus.SERVING });
    const error = await watch.next().then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.DeadlineExceeded);
  });

  it("tells its watchers NOT_SERVING and ends their streams when shutdown starts, instead of holding the grace period", async () => {
    const monitor = new HealthMonitor(db);
    const service = createHealthService(monitor, [], { pollMs: 60_000, lifetimeMs: 600_000, maxWatches: 4 });
    const ctx = watchContext();
    const seen: ServingStatus[] = [];
    const watched = (async () => {
      for await (const response of service.watch(create(HealthCheckRequestSchema, { service: "" }), ctx)) seen.push(response.status ?? ServingStatus.UNKNOWN);
    })();
    await expect.poll(() => seen.length).toBe(1);
    // Ended by the drain: its 600 s lifetime would outlast the test's timeout.
    monitor.markDraining();
    await watched;
    expect(seen).toEqual([ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
  });
});
