import { setTimeout as sleep } from "node:timers/promises";
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/health/v1/health_pb.js";
import type { HealthMonitor } from "../observability/health.js";

/** How a Watch stream is bounded: it needs no key, so that a prober can use it. */
export interface WatchLimits {
  /** How often a watch looks at the status again. */
  pollMs: number;
  /** How long one watch lasts before it ends (OK), and its client watches again. */
  lifetimeMs: number;
  /** Watches open at once, for the whole server; one more is refused with RESOURCE_EXHAUSTED. */
  maxWatches: number;
}

/**
 * A minute per watch, and 256 at once: far more than the probers of one
 * server need, and what a keyless client can hold is bounded.
 */
const WATCH_LIMITS: WatchLimits = { pollMs: 5_000, lifetimeMs: 60_000, maxWatches: 256 };

/**
 * The standard gRPC health service (grpc.health.v1), answering from the same
 * readiness checks as /api/health. "" means the whole server.
 */
export function createHealthService(monitor: HealthMonitor, served: readonly DescService[], limits: WatchLimits = WATCH_LIMITS): ServiceImpl<typeof Health> {
  const known = new Set(["", ...served.map((service) => service.typeName)]);
  const statusOf = (service: string): ServingStatus => {
    if (!known.has(service)) return ServingStatus.SERVICE_UNKNOWN;
    return monitor.ready() ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  };
  let watching = 0;

  return {
    check(request) {
      if (!known.has(request.service)) throw new ConnectError(`unknown service ${request.service}`, Code.NotFound);
      return { status: statusOf(request.service) };
    },
    list() {
      // One readiness check for all: every known service shares the server's status.
      const status = statusOf("");
      return { statuses: Object.fromEntries([...known].map((service) => [service, { status }])) };
    },
    async *watch(request, ctx) {
      if (watching >= limits.maxWatches) {
        throw new ConnectError(`${limits.maxWatches} health watches are open already; use Check, or watch again later`, Code.ResourceExhausted);
      }
      watching++;
      // The client leaving (or its deadline), or the server shutting down, ends the wait at once. (One
      // listener on each, taken away when the watch ends: the shutdown signal lives as long as the server.)
      const stop = new AbortController();
      const abort = () => stop.abort();
      ctx.signal.addEventListener("abort", abort, { once: true });
      monitor.drainingSignal.addEventListener("abort", abort, { once: true });
      if (ctx.signal.aborted || monitor.drainingSignal.aborted) stop.abort();
      const signal = stop.signal;
      try {
        const endsAt = performance.now() + limits.lifetimeMs;
        let last: ServingStatus | undefined;
        while (!signal.aborted) {
          const status = statusOf(request.service);
          if (status !== last) {
            last = status;
            yield { status };
          }
          const left = endsAt - performance.now();
          if (left <= 0) return;
          // The timer takes its abort listener away when it fires, so a long watch holds one at a time.
          await sleep(Math.min(limits.pollMs, left), undefined, { signal }).catch(() => undefined);
        }
        // A deadline that passed is DEADLINE_EXCEEDED, not a stream that ended well.
        if (ctx.signal.aborted) throw ConnectError.from(ctx.signal.reason, Code.Canceled);
        // Shutting down: the watcher hears NOT_SERVING and its stream ends, rather than being cut off at the
        // end of the grace period (which it would hold).
        if (last !== ServingStatus.NOT_SERVING && known.has(request.service)) yield { status: ServingStatus.NOT_SERVING };
      } finally {
        watching--;
        ctx.signal.removeEventListener("abort", abort);
        monitor.drainingSignal.removeEventListener("abort", abort);
      }
    },
  };
}

export function registerHealth(router: ConnectRouter, monitor: HealthMonitor, served: readonly DescService[]): void {
  router.service(Health, createHealthService(monitor, served));
}
