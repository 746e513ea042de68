import type { Protocol } from "../api/context.js";

/** The status report's components (part 4.7 of the specification). */
export type ComponentName = "API Edge" | "API Node" | "Dashboard" | "Data Sync";

export interface RequestObservation {
  /** REST path template or RPC path: bounded cardinality, never a raw URL. */
  route: string;
  protocol: Protocol | "http";
  /** Error code string, or "OK". */
  code: string;
  /** Whether the failure was the server's (5xx, Internal, ...). */
  serverError: boolean;
  clientError: boolean;
  durationMs: number;
  /** The component that served the call besides the edge, if any. */
  component: ComponentName | undefined;
  /**
   * Whether the call counts in the components' windows and uptime, which say how the service answers its
   * users: every server error does; otherwise not a probe's, scrape's or tool's call (/api/health,
   * /api/metrics, gRPC health and reflection, the status report itself, which monitors poll), nor a call
   * refused before it was let in (no key, an unknown path), which a keyless client could send by the
   * thousand to hide an outage. All are counted in the request totals.
   */
  inStatusReport: boolean;
}

export interface ComponentCounters {
  requests: number;
  successes: number;
  failures: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  /** Share of server errors among the recent requests, 0 to 1. */
  recentFailureRatio: number;
}

const BUCKETS_SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
const RECENT = 1024;

/** Recent latencies and outcomes in a fixed ring, for percentiles without unbounded memory. */
class RecentWindow {
  private readonly latencies = new Float64Array(RECENT);
  private readonly failed = new Uint8Array(RECENT);
  private size = 0;
  private next = 0;
  requests = 0;
  failures = 0;

  record(durationMs: number, serverError: boolean): void {
    this.requests++;
    if (serverError) this.failures++;
    this.latencies[this.next] = durationMs;
    this.failed[this.next] = serverError ? 1 : 0;
    this.next = (this.next + 1) % RECENT;
    this.size = Math.min(this.size + 1, RECENT);
  }

  counters(): ComponentCounters {
    const sorted = Array.from(this.latencies.subarray(0, this.size)).sort((a, b) => a - b);
    // Nearest rank: the smallest latency at least q of the window's calls took no longer than (of two calls, the
    // faster is the median, and p99 of 100 is the 99th, not the slowest).
    const at = (q: number) => (sorted.length === 0 ? 0 : (sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? 0));
    let recentFailures = 0;
    for (let i = 0; i < this.size; i++) recentFailures += this.failed[i] ?? 0;
    return {
      requests: this.requests,
      successes: this.requests - this.failures,
      failures: this.failures,
      latencyP50Ms: round3(at(0.5)),
      latencyP99Ms: round3(at(0.99)),
      recentFailureRatio: this.size === 0 ? 0 : recentFailures / this.size,
    };
  }
}

function round3(value: number): number {
  return Math.round(value * 1000) / 1000;
}

interface Histogram {
  counts: number[];
  sum: number;
  count: number;
}

/**
 * Request counters and latency histograms, exposed in Prometheus text format
 * on /api/metrics and summarised per component in the status report.
 */
export class Metrics {
  private readonly requestTotals = new Map<string, number>();
  private readonly histograms = new Map<string, Histogram>();
  private readonly components = new Map<ComponentName, RecentWindow>();
  private readonly counters = new Map<string, { help: string; values: Map<string, number> }>();

  observe(observation: RequestObservation): void {
    const outcome = observation.serverError ? "server_error" : observation.clientError ? "client_error" : "success";
    const labels = `route="${escapeLabel(observation.route)}",protocol="${observation.protocol}",outcome="${outcome}",code="${escapeLabel(observation.code)}"`;
    this.requestTotals.set(labels, (this.requestTotals.get(labels) ?? 0) + 1);

    const histogramLabels = `route="${escapeLabel(observation.route)}"`;
    let histogram = this.histograms.get(histogramLabels);
    if (!histogram) {
      histogram = { counts: BUCKETS_SECONDS.map(() => 0), sum: 0, count: 0 };
      this.histograms.set(histogramLabels, histogram);
    }
    const seconds = observation.durationMs / 1000;
    BUCKETS_SECONDS.forEach((bound, i) => {
      if (seconds <= bound) histogram.counts[i] = (histogram.counts[i] ?? 0) + 1;
    });
    histogram.sum += seconds;
    histogram.count++;

    if (!observation.inStatusReport) return;
    this.window("API Edge").record(observation.durationMs, observation.serverError);
    if (observation.component) this.window(observation.component).record(observation.durationMs, observation.serverError);
  }

  /** Adds to a named counter (engine errors, deliveries, ...), labelled by one value. */
  increment(name: string, help: string, label: string, by = 1): void {
    let counter = this.counters.get(name);
    if (!counter) {
      counter = { help, values: new Map() };
      this.counters.set(name, counter);
    }
    counter.values.set(label, (counter.values.get(label) ?? 0) + by);
  }

  component(name: ComponentName): ComponentCounters {
    return this.window(name).counters();
  }

  /** Share of requests since start that did not end in a server error. */
  availability(): number {
    const edge = this.window("API Edge");
    return edge.requests === 0 ? 1 : (edge.requests - edge.failures) / edge.requests;
  }

  prometheus(gauges: Record<string, { help: string; value: number }> = {}): string {
    const lines: string[] = [
      "# HELP fraud_requests_total Requests served, by route, protocol, outcome and error code.",
      "# TYPE fraud_requests_total counter",
    ];
    for (const [labels, value] of this.requestTotals) lines.push(`fraud_requests_total{${labels}} ${value}`);
    lines.push(
      "# HELP fraud_request_duration_seconds Request latency by route.",
      "# TYPE fraud_request_duration_seconds histogram",
    );
    for (const [labels, histogram] of this.histograms) {
      BUCKETS_SECONDS.forEach((bound, i) => {
        lines.push(`fraud_request_duration_seconds_bucket{${labels},le="${bound}"} ${histogram.counts[i] ?? 0}`);
      });
      lines.push(`fraud_request_duration_seconds_bucket{${labels},le="+Inf"} ${histogram.count}`);
      lines.push(`fraud_request_duration_seconds_sum{${labels}} ${histogram.sum}`);
      lines.push(`fraud_request_duration_seconds_count{${labels}} ${histogram.count}`);
    }
    for (const [name, counter] of this.counters) {
      lines.push(`# HELP ${name} ${counter.help}`, `# TYPE ${name} counter`);
      for (const [label, value] of counter.values) lines.push(`${name}{kind="${escapeLabel(label)}"} ${value}`);
    }
    for (const [name, gauge] of Object.entries(gauges)) {
      lines.push(`# HELP ${name} ${gauge.help}`, `# TYPE ${name} gauge`, `${name} ${gauge.value}`);
    }
    return lines.join("\n") + "\n";
  }

  private window(name: ComponentName): RecentWindow {
    let window = this.components.get(name);
    if (!window) {
      window = new RecentWindow();
      this.components.set(name, window);
    }
    return window;
  }
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}
