// Turns the measured runs into the printed tables, the target verdicts and
// the JSON written to bench/results/latest.json.

import type { EngineBenchResult } from "./engine.js";
import type { LoadResult } from "./load.js";
import type { ResourceUsage } from "./processes.js";

export type RunId =
  | "rest-decide-policies"
  | "echo-http"
  | "rest-decide"
  | "rest-analyze"
  | "connect-decide"
  | "grpc-web-decide"
  | "echo-grpc"
  | "grpc-decide"
  | "fixed-rate";

export interface RunRecord {
  id: RunId;
  title: string;
  /** Which process answered: the service or one of the baselines. */
  server: "service" | "echo-http" | "echo-grpc";
  mode: "closed" | "open";
  /** Requests per second offered by the open loop. */
  offeredRate?: number;
  load: LoadResult;
  resources: ResourceUsage;
}

export interface TargetVerdict {
  name: string;
  measured: string;
  /** undefined when a run it needs was not selected. */
  pass: boolean | undefined;
}

export interface Thresholds {
  restDecideShare: number;
  analyzeShare: number;
  grpcDecideShare: number;
  fixedRateP99Ms: number;
  rssMb: number;
  policyShare: number;
}

export const THRESHOLDS: Thresholds = {
  restDecideShare: 0.2,
  analyzeShare: 0.3,
  grpcDecideShare: 0.2,
  fixedRateP99Ms: 10,
  rssMb: 300,
  policyShare: 0.8,
};

const int = (n: number): string => Math.round(n).toLocaleString("en-US");
const ms = (n: number): string => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2));
const pct = (n: number): string => `${(100 * n).toFixed(1)}%`;

/** Text columns (the first `textColumns`) align left, number columns right. */
function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>, textColumns = 1): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => (i < textColumns ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join("  ").trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

export function runsTable(runs: readonly RunRecord[]): string {
  return table(
    ["run", "req/s", "ok/s", "p50 ms", "p99 ms", "max ms", "errors", "srv CPU µs/req", "srv CPU %", "srv peak RSS MB", "client CPU %", "other CPU %"],
    runs.map((r) => [
      `${r.id}  ${r.title}`,
      int(r.load.requestsPerSecond),
      int(r.load.okPerSecond),
      ms(r.load.latency.p50),
      ms(r.load.latency.p99),
      ms(r.load.latency.max),
      int(r.load.errors),
      r.resources.serverCpuUsPerRequest.toFixed(0),
      r.resources.serverCpuPercent.toFixed(0),
      r.resources.serverPeakRssMb.toFixed(0),
      r.resources.clientCpuPercent.toFixed(0),
      r.resources.otherCpuPercent.toFixed(0),
    ]),
  );
}

/**
 * What each protocol adds on the service for the same decide-shaped call,
 * measured as server CPU per request (independent of how busy the client
 * was), next to the bare baselines of the same transport.
 */
export function protocolTable(runs: readonly RunRecord[]): string | undefined {
  const byId = new Map(runs.map((r) => [r.id, r]));
  const rest = byId.get("rest-decide");
  const rows: string[][] = [];
  const add = (id: RunId, transport: string, baseline: RunId): void => {
    const run = byId.get(id);
    if (!run) return;
    const base = byId.get(baseline);
    const cpu = run.resources.serverCpuUsPerRequest;
    rows.push([
      `${id}`,
      transport,
      cpu.toFixed(0),
      rest && id !== "rest-decide" ? signed(cpu - rest.resources.serverCpuUsPerRequest) : "",
      base ? base.resources.serverCpuUsPerRequest.toFixed(0) : "",
      base ? `${(cpu / Math.max(1e-9, base.resources.serverCpuUsPerRequest)).toFixed(1)}×` : "",
      base ? pct(run.load.requestsPerSecond / Math.max(1e-9, base.load.requestsPerSecond)) : "",
    ]);
  };
  add("rest-decide", "HTTP/1.1 JSON", "echo-http");
  add("connect-decide", "HTTP/1.1 Connect JSON", "echo-http");
  add("grpc-web-decide", "HTTP/1.1 gRPC-Web binary", "echo-http");
  add("grpc-decide", "h2c gRPC (connect-node)", "echo-grpc");
  if (rows.length === 0) return undefined;
  return table(["decide over", "transport", "srv CPU µs/req", "vs REST", "baseline µs/req", "× baseline", "req/s share of baseline"], rows, 2);
}

const signed = (n: number): string => `${n >= 0 ? "+" : ""}${n.toFixed(0)}`;

/** Known thread roles first, in the order a decide passes through them; unknown ones after, "other" last. */
const THREAD_ORDER = ["request", "engine", "writer", "wal"];

/**
 * The service's CPU per request split by thread (bench/processes.ts). For
 * decide, the writer and wal columns are what durability costs in CPU: the
 * decision, evidence and outbox rows committed before the answer, the audit
 * entry, case and follow-up after it, and the WAL checkpoints.
 */
export function threadTable(runs: readonly RunRecord[]): string | undefined {
  const split = runs.filter((r) => Object.keys(r.resources.serverCpuUsByThread).length > 0);
  if (split.length === 0) return undefined;
  const seen = new Set(split.flatMap((r) => Object.keys(r.resources.serverCpuUsByThread)));
  const roles = [
    ...THREAD_ORDER.filter((role) => seen.has(role)),
    ...[...seen].filter((role) => !THREAD_ORDER.includes(role) && role !== "other").sort(),
    ...(seen.has("other") ? ["other"] : []),
  ];
  return table(
    ["run", ...roles, "writer + wal share"],
    split.map((r) => {
      const us = r.resources.serverCpuUsByThread;
      const total = Object.values(us).reduce((sum, n) => sum + n, 0);
      const durable = (us.writer ?? 0) + (us.wal ?? 0);
      return [r.id, ...roles.map((role) => (us[role] ?? 0).toFixed(0)), total > 0 ? pct(durable / total) : ""];
    }),
  );
}

export function errorReport(runs: readonly RunRecord[]): string | undefined {
  const lines: string[] = [];
  for (const run of runs) {
    for (const group of run.load.errorGroups.slice(0, 3)) {
      lines.push(`  ${run.id}: ${int(group.count)} × ${group.label}${group.sample ? ` — ${group.sample.replace(/\s+/g, " ")}` : ""}`);
    }
  }
  return lines.length === 0 ? undefined : lines.join("\n");
}

/** Throughput share of a baseline, counting successful answers only: a fast error is not a decision. */
function shareVerdict(name: string, runs: ReadonlyMap<RunId, RunRecord>, id: RunId, baseline: RunId, threshold: number): TargetVerdict {
  const run = runs.get(id);
  const base = runs.get(baseline);
  if (!run || !base) return { name, measured: "not run", pass: undefined };
  const share = run.load.okPerSecond / Math.max(1e-9, base.load.okPerSecond);
  let measured = `${pct(share)} (${int(run.load.okPerSecond)} vs ${int(base.load.okPerSecond)} ok req/s)`;
  if (run.load.errors > 0) {
    measured += `; ${int(run.load.errors)} errors, ${pct(run.load.requestsPerSecond / Math.max(1e-9, base.load.requestsPerSecond))} counting them`;
  }
  return { name, measured, pass: run.load.errors === 0 && share >= threshold };
}

export function verdicts(runList: readonly RunRecord[], t: Thresholds = THRESHOLDS): TargetVerdict[] {
  const runs = new Map(runList.map((r) => [r.id, r]));
  const result = [
    shareVerdict(`REST decide ≥ ${pct(t.restDecideShare)} of node:http echo throughput`, runs, "rest-decide", "echo-http", t.restDecideShare),
    shareVerdict(`REST analyze ≥ ${pct(t.analyzeShare)} of node:http echo throughput`, runs, "rest-analyze", "echo-http", t.analyzeShare),
    shareVerdict(`gRPC decide ≥ ${pct(t.grpcDecideShare)} of grpc-js echo throughput`, runs, "grpc-decide", "echo-grpc", t.grpcDecideShare),
  ];
  result.push(
    shareVerdict(`decide under 20 active + 5 shadow rules ≥ ${pct(t.policyShare)} of decide under the default policy`, runs, "rest-decide-policies", "rest-decide", t.policyShare),
  );
  const fixed = runs.get("fixed-rate");
  result.push(
    fixed
      ? {
          name: `p99 < ${t.fixedRateP99Ms} ms at ${int(fixed.offeredRate ?? 0)} decides/s`,
          measured: `p99 ${ms(fixed.load.latency.p99)} ms, ${int(fixed.load.requestsPerSecond)} answered/s${fixed.load.errors > 0 ? `; ${int(fixed.load.errors)} errors` : ""}`,
          pass: fixed.load.errors === 0 && fixed.load.latency.p99 < t.fixedRateP99Ms,
        }
      : { name: `p99 < ${t.fixedRateP99Ms} ms at fixed rate`, measured: "not run", pass: undefined },
  );
  const serviceRuns = runList.filter((r) => r.server === "service");
  if (serviceRuns.length === 0) {
    result.push({ name: `service RSS under load < ${t.rssMb} MB`, measured: "not run", pass: undefined });
  } else {
    const peak = serviceRuns.reduce((top, r) => (r.resources.serverPeakRssMb > top.resources.serverPeakRssMb ? r : top));
    result.push({
      name: `service RSS under load < ${t.rssMb} MB`,
      measured: `peak ${peak.resources.serverPeakRssMb.toFixed(0)} MB (during ${peak.id})`,
      pass: peak.resources.serverPeakRssMb < t.rssMb,
    });
  }
  return result;
}

export function verdictTable(list: readonly TargetVerdict[]): string {
  return table(
    ["target", "measured", "verdict"],
    list.map((v) => [v.name, v.measured, v.pass === undefined ? "SKIP" : v.pass ? "PASS" : "FAIL"]),
    3,
  );
}

export interface BenchResults {
  startedAt: string;
  finishedAt: string;
  machine: { cpus: number; cpuModel: string; totalMemoryMb: number; node: string; platform: string };
  options: Record<string, number | string>;
  service?: { idleRssMb: number; lifetimePeakRssMb: number };
  runs: RunRecord[];
  engine?: EngineBenchResult;
  targets: TargetVerdict[];
}
