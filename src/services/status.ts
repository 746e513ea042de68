import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ComponentStatusSchema, StatusService } from "../../gen/fraud/v1/status_pb.js";
import { callContext } from "../api/context.js";
import { apiError } from "../api/errors.js";
import type { Clock } from "../clock.js";
import { BACKLOG_DEGRADED_AT, type HealthMonitor } from "../observability/health.js";
import type { ComponentCounters, ComponentName, Metrics } from "../observability/metrics.js";

/** Status values, worst last. docs/api-decisions.md documents what each means. */
const LEVELS = ["operational", "degraded", "outage"] as const;
type Level = (typeof LEVELS)[number];

function levelFromFailures(counters: ComponentCounters): Level {
  if (counters.recentFailureRatio >= 0.5) return "outage";
  if (counters.recentFailureRatio >= 0.05) return "degraded";
  return "operational";
}

function worst(levels: Level[]): Level {
  return levels.reduce<Level>((a, b) => (LEVELS.indexOf(b) > LEVELS.indexOf(a) ? b : a), "operational");
}

export function createStatusService(deps: {
  metrics: Metrics;
  health: HealthMonitor;
  clock: Clock;
}): ServiceImpl<typeof StatusService> {
  return {
    getStatus(request, ctx) {
      const principal = callContext(ctx.values).principal;
      // Part 5: every operation but the public status needs a key, and part 4.7 makes the public status the
      // call with public=true. The contract lets a call without a key through (allow_anonymous) for that one.
      if (!principal && !request.public) {
        throw apiError("UNAUTHORIZED", "an API key is required: send it in X-API-Key or Authorization: Bearer, or ask for the public report with public=true");
      }
      const detailed = !request.public && principal?.permissions.has("status:read") === true;

      const { checks, backlog } = deps.health.report();
      const databaseOk = checks.find((check) => check.name === "database")?.ok ?? false;
      const components: Array<{ name: ComponentName; level: Level; detail: string }> = [
        { name: "API Edge", level: levelFromFailures(deps.metrics.component("API Edge")), detail: "" },
        { name: "API Node", level: levelFromFailures(deps.metrics.component("API Node")), detail: "" },
        { name: "Dashboard", level: levelFromFailures(deps.metrics.component("Dashboard")), detail: "" },
        {
          name: "Data Sync",
          level: !databaseOk || backlog === undefined ? "outage" : backlog >= BACKLOG_DEGRADED_AT ? "degraded" : "operational",
          detail: `database ${databaseOk ? "ok" : "failing"}; ${backlog ?? "unknown"} pending background tasks`,
        },
      ];

      return {
        status: worst(components.map((c) => c.level)),
        uptime: `${(deps.metrics.availability() * 100).toFixed(2)}%`,
        lastUpdated: timestampFromMs(deps.clock.now()),
        components: components.map((component): MessageInitShape<typeof ComponentStatusSchema> => {
          const base: MessageInitShape<typeof ComponentStatusSchema> = { name: component.name, status: component.level };
          if (!detailed) return base;
          const counters = deps.metrics.component(component.name);
          return {
            ...base,
            metrics: {
              latencyP50Ms: counters.latencyP50Ms,
              latencyP99Ms: counters.latencyP99Ms,
              requestCount: counters.requests,
              successCount: counters.successes,
              failureCount: counters.failures,
              detail: component.detail,
            },
          };
        }),
      };
    },
  };
}
