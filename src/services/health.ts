import type { ConnectRouter } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/health/v1/health_pb.js";
import type { HealthMonitor } from "../observability/health.js";

const WATCH_POLL_MS = 5_000;

/**
 * The standard gRPC health service (grpc.health.v1), answering from the same
 * readiness checks as /api/health. "" means the whole server.
 */
export function registerHealth(router: ConnectRouter, monitor: HealthMonitor, served: readonly DescService[]): void {
  const known = new Set(["", ...served.map((service) => service.typeName)]);
  const statusOf = (service: string): ServingStatus => {
    if (!known.has(service)) return ServingStatus.SERVICE_UNKNOWN;
    return monitor.ready() ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  };

  router.service(Health, {
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
      let last: ServingStatus | undefined;
      while (!ctx.signal.aborted) {
        const status = statusOf(request.service);
        if (status !== last) {
          last = status;
          yield { status };
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, WATCH_POLL_MS);
          ctx.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve();
          }, { once: true });
        });
      }
    },
  });
}
