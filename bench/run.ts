// `npm run bench`: starts the service and two bare baselines (a node:http
// echo and a @grpc/grpc-js echo) as child processes on 127.0.0.1, drives each
// with the same load generator (bench/load.ts), runs a fixed-rate latency run
// and the engine micro-benchmark, then prints the figures, the ratios to the
// baselines and a PASS/FAIL per target, and writes bench/results/latest.json.
// Exits 1 when a target fails, so it can gate CI once decide has landed.
//
// Options (flag or environment variable; defaults give a run of about 80 s):
//   --seconds N          BENCH_SECONDS           measured seconds per run (7)
//   --warmup N           BENCH_WARMUP_SECONDS    unmeasured seconds before each run (min(2, seconds/2))
//   --concurrency N      BENCH_CONCURRENCY       requests in flight in the closed-loop runs (32)
//   --rate N             BENCH_RATE              requests per second of the fixed-rate run (1000)
//   --grpc-channels N    BENCH_GRPC_CHANNELS     gRPC connections (2)
//   --engine-iterations N BENCH_ENGINE_ITERATIONS engine micro-benchmark operations (50000)
//   --only a,b           BENCH_ONLY              runs to do: run ids from the table, or "engine"
// Environment only, for investigating:
//   BENCH_SERVICE_NODE_OPTIONS  extra node options of the service, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
//   BENCH_KEEP_DATA=1           keep the temporary directory (database, service log) and print its path

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { create, toBinary } from "@bufbuild/protobuf";
import { DecideRequestSchema } from "../gen/fraud/v1/decision_pb.js";
import { formatEngineResult, type EngineBenchResult } from "./engine.js";
import { benchRequests, toAnalyzeRequest } from "./inputs.js";
import {
  classifyGrpcWeb,
  classifyHttpStatus,
  closedLoop,
  grpcRequester,
  httpRequester,
  openLoop,
  type LoadResult,
  type Phases,
  type Requester,
} from "./load.js";
import { ResourceSampler, assertRunning, killAllNow, runToCompletion, startServer, statusKb, stopAll, type Server } from "./processes.js";
import {
  errorReport,
  protocolTable,
  threadTable,
  runsTable,
  verdictTable,
  verdicts,
  type BenchResults,
  type RunId,
  type RunRecord,
} from "./report.js";

const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.dirname(BENCH_DIR);
const FRAUDCTL = path.join(REPO_ROOT, "bin", "fraudctl.js");
const RESULTS_PATH = path.join(BENCH_DIR, "results", "latest.json");
const DECIDE_METHOD = "/fraud.v1.DecisionService/Decide";
/** The open loop's backlog limit: far above what 1,000/s needs, low enough to keep a stalled server from exhausting the client. */
const MAX_IN_FLIGHT = 5_000;
/** Other processes' CPU (100 = one core) above which a run's figures are flagged as disturbed. */
const NOISE_CPU_PERCENT = 20;

// ---------------------------------------------------------------- options

const RUN_IDS: readonly RunId[] = ["echo-http", "rest-decide", "rest-analyze", "connect-decide", "grpc-web-decide", "echo-grpc", "grpc-decide", "fixed-rate", "rest-decide-policies"];

interface Options {
  seconds: number;
  warmupSeconds: number;
  concurrency: number;
  rate: number;
  grpcChannels: number;
  engineIterations: number;
  only: ReadonlySet<string>;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string" },
      warmup: { type: "string" },
      concurrency: { type: "string" },
      rate: { type: "string" },
      "grpc-channels": { type: "string" },
      "engine-iterations": { type: "string" },
      only: { type: "string" },
    },
    strict: true,
  });
  const number = (flag: string | undefined, env: string, fallback: number, min: number): number => {
    const raw = flag ?? process.env[env];
    if (raw === undefined || raw === "") return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value < min) throw new Error(`${env} (or its flag) must be a number of at least ${min}, got "${raw}"`);
    return value;
  };
  const seconds = number(values.seconds, "BENCH_SECONDS", 7, 0.5);
  const onlyRaw = values.only ?? process.env.BENCH_ONLY ?? "";
  const only = new Set(onlyRaw.split(",").map((s) => s.trim()).filter(Boolean));
  const unknown = [...only].filter((id) => id !== "engine" && !(RUN_IDS as readonly string[]).includes(id));
  if (unknown.length > 0) throw new Error(`unknown run ${unknown.join(", ")}; choose from ${[...RUN_IDS, "engine"].join(", ")}`);
  return {
    seconds,
    warmupSeconds: number(values.warmup, "BENCH_WARMUP_SECONDS", Math.min(2, seconds / 2), 0),
    concurrency: Math.round(number(values.concurrency, "BENCH_CONCURRENCY", 32, 1)),
    rate: number(values.rate, "BENCH_RATE", 1000, 1),
    grpcChannels: Math.round(number(values["grpc-channels"], "BENCH_GRPC_CHANNELS", 2, 1)),
    engineIterations: Math.round(number(values["engine-iterations"], "BENCH_ENGINE_ITERATIONS", 50_000, 100)),
    only,
  };
}

// ---------------------------------------------------------------- set-up

interface BenchKeys {
  secret: string;
  publishable: string;
}

/** A dedicated account whose decide limit the load cannot reach (fraudctl accounts create --json). */
function createAccount(dataDir: string, into: BenchKeys): void {
  const output = runToCompletion([FRAUDCTL, "accounts", "create", "--name", "Bench", "--decide-rate-limit", "100000000", "--json"], {
    FRAUD_DATA_DIR: dataDir,
  });
  const parsed: unknown = JSON.parse(output);
  const test = (parsed as { keys?: { test?: { secret?: unknown; publishable?: unknown } } }).keys?.test;
  if (typeof test?.secret !== "string" || typeof test.publishable !== "string") throw new Error(`unexpected accounts create output: ${output}`);
  into.secret = test.secret;
  into.publishable = test.publishable;
}

/** gRPC-Web frames each message: one flag byte (0 = data) and a 4-byte big-endian length. */
function grpcWebFrame(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

interface Scenario {
  id: RunId;
  title: string;
  server: RunRecord["server"];
  requester(): Requester;
  /** Absent: closed loop at the configured concurrency. */
  rate?: number;
  /** Runs once before the load starts (for example, creating policies). */
  prepare?(): Promise<void>;
}

/**
 * The selected runs. Ports and keys are read when a run starts (requester()),
 * so the list can be built before the servers it names are started.
 */
function scenarios(options: Options, servers: Partial<Record<RunRecord["server"], Server>>, keys: BenchKeys): Scenario[] {
  const requests = benchRequests().map((n) => n.request);
  const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
  const decideJson = requests.map(json);
  const analyzeJson = requests.map((r) => json(toAnalyzeRequest(r)));
  const decideProto = requests.map((r) => toBinary(DecideRequestSchema, create(DecideRequestSchema, r)));
  const grpcBodies = decideProto.map((bytes) => Buffer.from(bytes));
  const grpcWebBodies = decideProto.map(grpcWebFrame);
  const sockets = options.concurrency;
  const restHeaders = (): Record<string, string> => ({ "content-type": "application/json", "x-api-key": keys.secret });
  const port = (server: RunRecord["server"]): number => {
    const found = servers[server];
    if (!found) throw new Error(`${server} was not started`);
    return found.port;
  };

  const list: Scenario[] = [
    {
      id: "echo-http",
      title: "node:http echo, decide JSON (baseline)",
      server: "echo-http",
      // The REST request exactly, API key included, so both sides parse the same bytes.
      requester: () => httpRequester({ port: port("echo-http"), path: "/api/v1/decide", headers: restHeaders(), bodies: decideJson, sockets, classify: classifyHttpStatus }),
    },
    {
      id: "rest-decide",
      title: "REST POST /api/v1/decide",
      server: "service",
      requester: () => httpRequester({ port: port("service"), path: "/api/v1/decide", headers: restHeaders(), bodies: decideJson, sockets, classify: classifyHttpStatus }),
    },
    {
      id: "rest-analyze",
      title: "REST POST /api/v1/analyze (publishable key)",
      server: "service",
      requester: () =>
        httpRequester({
          port: port("service"),
          path: "/api/v1/analyze",
          // Edge middleware calls analyze with the publishable key.
          headers: { "content-type": "application/json", "x-api-key": keys.publishable },
          bodies: analyzeJson,
          sockets,
          classify: classifyHttpStatus,
        }),
    },
    {
      id: "connect-decide",
      title: "Connect JSON over HTTP/1.1, Decide",
      server: "service",
      requester: () =>
        httpRequester({
          port: port("service"),
          path: DECIDE_METHOD,
          headers: { ...restHeaders(), "connect-protocol-version": "1" },
          bodies: decideJson,
          sockets,
          classify: classifyHttpStatus,
        }),
    },
    {
      id: "grpc-web-decide",
      title: "gRPC-Web binary over HTTP/1.1, Decide",
      server: "service",
      requester: () =>
        httpRequester({
          port: port("service"),
          path: DECIDE_METHOD,
          headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", "x-api-key": keys.secret },
          bodies: grpcWebBodies,
          sockets,
          classify: classifyGrpcWeb,
        }),
    },
    {
      id: "echo-grpc",
      title: "grpc-js echo, decide protobuf (baseline)",
      server: "echo-grpc",
      requester: () => grpcRequester({ port: port("echo-grpc"), method: DECIDE_METHOD, metadata: { "x-api-key": keys.secret }, bodies: grpcBodies, channels: options.grpcChannels }),
    },
    {
      id: "grpc-decide",
      title: "gRPC over h2c (grpc-js client), Decide",
      server: "service",
      requester: () => grpcRequester({ port: port("service"), method: DECIDE_METHOD, metadata: { "x-api-key": keys.secret }, bodies: grpcBodies, channels: options.grpcChannels }),
    },
    {
      id: "fixed-rate",
      title: `REST decide at a fixed ${options.rate.toLocaleString("en-US")}/s (open loop)`,
      server: "service",
      rate: options.rate,
      requester: () => httpRequester({ port: port("service"), path: "/api/v1/decide", headers: restHeaders(), bodies: decideJson, sockets, classify: classifyHttpStatus }),
    },
    {
      // Last: the policies it creates stay in place for any later service run.
      id: "rest-decide-policies",
      title: "REST decide under 20 active + 5 shadow policy rules",
      server: "service",
      prepare: () => createBenchPolicies(port("service"), keys.secret),
      requester: () => httpRequester({ port: port("service"), path: "/api/v1/decide", headers: restHeaders(), bodies: decideJson, sockets, classify: classifyHttpStatus }),
    },
  ];
  return list.filter((s) => options.only.size === 0 || options.only.has(s.id));
}

// ---------------------------------------------------------------- running

/**
 * 20 active policies of one rule each that ordinary traffic does not match (so
 * every decision evaluates all of them before the default thresholds decide),
 * and 5 shadow policies, over scores, signals, amounts, lists and metadata.
 */
async function createBenchPolicies(port: number, secret: string): Promise<void> {
  const api = async (method: string, pathname: string, body: unknown): Promise<void> => {
    const res = await fetch(`http://127.0.0.1:${port}${pathname}`, {
      method,
      headers: { "content-type": "application/json", "x-api-key": secret },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${pathname}: ${res.status} ${await res.text()}`);
  };
  await api("PUT", "/api/v1/lists/blocked_ips", { kind: "ip", type: "deny" });
  await api("POST", "/api/v1/lists/blocked_ips/entries", { entries: [{ value: "198.51.100.0/24" }, { value: "2001:db8:dead::/48" }] });
  const active = [
    "amount > 50000",
    "signals.velocity.user.lastMinute > 40",
    "signals.velocity.ip.lastHour > 5000",
    'email == "known.fraud@example.com"',
    "ip in lists.blocked_ips",
    "signals.network.tor AND signals.device.webdriver AND score < 10",
    'currency == "XTS"',
    "signals.history.impossibleTravel AND amount > 10000",
    "signals.email.disposable AND amount > 20000",
    "signals.velocity.usersPerDevice24h > 500",
    'action == "transfer" AND amount > 90000',
    'signals.geo.country == "AQ"',
    "signals.device.vm AND signals.behavior.tooFast AND score < 5",
    "signals.amount.spike AND signals.history.newDevice AND amount > 30000",
    'deviceId == "dev_known_fraud"',
    'userId == "user_known_fraud"',
    "signals.consortium.matches > 10",
    "signals.graph.fraudNeighbours > 20",
    "signals.network.datacenter AND score > 99",
    "score > 100",
  ];
  for (const [i, condition] of active.entries()) {
    await api("POST", "/api/v1/policies", { name: `active ${i}`, status: "active", priority: 100 - i, rules: [{ condition, action: "deny" }] });
  }
  const shadow = ["score >= 60", "signals.email.disposable", "signals.network.tor", "amount > 1000", 'action == "signup" AND score >= 20'];
  for (const [i, condition] of shadow.entries()) {
    await api("POST", "/api/v1/policies", { name: `shadow ${i}`, status: "shadow", priority: 50 - i, rules: [{ condition, action: "challenge" }] });
  }
}

async function runScenario(scenario: Scenario, server: Server, options: Options): Promise<RunRecord> {
  await scenario.prepare?.();
  const requester = scenario.requester();
  const sampler = new ResourceSampler(server.pid);
  const phases: Phases = {
    warmupMs: options.warmupSeconds * 1000,
    durationMs: options.seconds * 1000,
    onMeasureStart: () => sampler.measureStart(),
    onMeasureEnd: () => sampler.measureEnd(),
  };
  let load: LoadResult;
  try {
    load =
      scenario.rate === undefined
        ? await closedLoop(requester, options.concurrency, phases)
        : await openLoop(requester, scenario.rate, MAX_IN_FLIGHT, phases);
  } finally {
    requester.close();
  }
  const resources = sampler.finish(load.requests);
  assertRunning(server);
  return {
    id: scenario.id,
    title: scenario.title,
    server: scenario.server,
    mode: scenario.rate === undefined ? "closed" : "open",
    ...(scenario.rate === undefined ? {} : { offeredRate: scenario.rate }),
    load,
    resources,
  };
}

function progressLine(run: RunRecord): string {
  const l = run.load;
  const errors = l.errors > 0 ? `, ${l.errors.toLocaleString("en-US")} errors (${l.errorGroups[0]?.label ?? ""})` : "";
  return `  ${run.id}: ${Math.round(l.requestsPerSecond).toLocaleString("en-US")} req/s, p50 ${l.latency.p50.toFixed(2)} ms, p99 ${l.latency.p99.toFixed(2)} ms${errors}`;
}

async function main(): Promise<number> {
  const options = parseOptions();
  const startedAt = new Date();
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-bench-"));
  // Whatever ends the benchmark, its servers and temporary files go with it.
  process.on("exit", () => {
    killAllNow();
    // BENCH_KEEP_DATA=1 leaves the service's database behind for inspection.
    if (process.env.BENCH_KEEP_DATA === "1") console.log(`kept ${workDir}`);
    else fs.rmSync(workDir, { recursive: true, force: true });
  });
  for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
    process.once(signal, () => {
      process.stderr.write(`\n${signal}: stopping the benchmark and its servers\n`);
      process.exit(code);
    });
  }

  const servers: Partial<Record<RunRecord["server"], Server>> = {};
  const keys: BenchKeys = { secret: "", publishable: "" };
  const selected = scenarios(options, servers, keys);
  const needs = (server: RunRecord["server"]): boolean => selected.some((s) => s.server === server);
  let idleRssMb: number | undefined;
  if (needs("service")) {
    const dataDir = path.join(workDir, "data");
    fs.mkdirSync(dataDir);
    createAccount(dataDir, keys);
    servers.service = await startServer(
      "service",
      // BENCH_SERVICE_NODE_OPTIONS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") profiles the service under load.
      [...(process.env.BENCH_SERVICE_NODE_OPTIONS?.split(" ").filter(Boolean) ?? []), FRAUDCTL, "serve"],
      {
        PORT: "0",
        HOST: "127.0.0.1",
        FRAUD_DATA_DIR: dataDir,
        // The per-client-IP analyze limit would otherwise refuse all but the first 30 calls a minute.
        FRAUD_ANALYZE_RATE_LIMIT: "1000000000",
        FRAUD_SEED_DEMO: "false",
        FRAUD_SHUTDOWN_GRACE_MS: "1000",
      },
      path.join(workDir, "service.log"),
      false,
    );
    idleRssMb = statusKb(servers.service.pid, "VmRSS") / 1024;
  }
  for (const name of ["echo-http", "echo-grpc"] as const) {
    if (needs(name)) {
      servers[name] = await startServer(name, ["--import", "tsx", path.join(BENCH_DIR, `${name}.ts`)], { PORT: "0" }, path.join(workDir, `${name}.log`), true);
    }
  }

  const cpus = os.cpus();
  const machine = {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? "unknown",
    totalMemoryMb: Math.round(os.totalmem() / 2 ** 20),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
  };
  console.log(
    `Fraud decision service benchmark: ${machine.cpus} CPUs (${machine.cpuModel}), Node ${machine.node}\n` +
      `${options.seconds} s measured after ${options.warmupSeconds} s warm-up per run; closed loop ${options.concurrency} in flight; ` +
      `fixed rate ${options.rate}/s; ${options.grpcChannels} gRPC connection(s); everything on 127.0.0.1\n`,
  );

  const runs: RunRecord[] = [];
  for (const scenario of selected) {
    const server = servers[scenario.server];
    if (!server) throw new Error(`${scenario.server} was not started`);
    process.stdout.write(`-> ${scenario.id}: ${scenario.title}\n`);
    const run = await runScenario(scenario, server, options);
    runs.push(run);
    console.log(progressLine(run));
  }
  const service = servers.service && idleRssMb !== undefined
    ? { idleRssMb, lifetimePeakRssMb: statusKb(servers.service.pid, "VmHWM") / 1024 }
    : undefined;
  await stopAll();

  let engine: EngineBenchResult | undefined;
  if (options.only.size === 0 || options.only.has("engine")) {
    process.stdout.write("-> engine micro-benchmark (own process, servers stopped)\n");
    const output = runToCompletion(["--import", "tsx", path.join(BENCH_DIR, "engine.ts"), "--json", "--iterations", String(options.engineIterations)], {});
    engine = JSON.parse(output.trim().split("\n").at(-1) ?? "") as EngineBenchResult;
  }

  const targets = verdicts(runs);
  const sections: string[] = [];
  if (runs.length > 0) sections.push("Load runs (latency in ms over every answer; srv = the process answering)", runsTable(runs));
  const protocols = protocolTable(runs);
  if (protocols) sections.push("Decide overhead per protocol (server CPU per request; baseline = bare echo of the same transport)", protocols);
  const threads = threadTable(runs);
  if (threads) {
    sections.push(
      "Service CPU per request by thread, µs (request: HTTP, gateway, policies; engine: signals and score; writer: the durable write and what follows the answer; wal: checkpoints; other: GC helpers, libuv)",
      threads,
    );
  }
  if (service) {
    sections.push(`Service memory: ${service.idleRssMb.toFixed(0)} MB resident when idle, ${service.lifetimePeakRssMb.toFixed(0)} MB peak over its lifetime (VmHWM)`);
  }
  const noisy = runs.filter((r) => r.resources.otherCpuPercent > NOISE_CPU_PERCENT);
  if (noisy.length > 0) {
    sections.push(
      `WARNING: other processes used CPU during ${noisy.map((r) => `${r.id} (${r.resources.otherCpuPercent.toFixed(0)}%)`).join(", ")}; ` +
        "client and server already share the cores, so those figures are low and the ratios skewed. Rerun on a quiet machine.",
    );
  }
  const errors = errorReport(runs);
  if (errors) sections.push("Errors (non-2xx HTTP, non-OK gRPC, transport failures; top 3 per run)", errors);
  if (engine) sections.push(formatEngineResult(engine));
  sections.push("Targets", verdictTable(targets));
  console.log("\n" + sections.join("\n\n"));

  const results: BenchResults = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    machine,
    options: {
      seconds: options.seconds,
      warmupSeconds: options.warmupSeconds,
      concurrency: options.concurrency,
      rate: options.rate,
      grpcChannels: options.grpcChannels,
      engineIterations: options.engineIterations,
      only: [...options.only].join(","),
    },
    ...(service ? { service } : {}),
    runs,
    ...(engine ? { engine } : {}),
    targets,
  };
  fs.mkdirSync(path.dirname(RESULTS_PATH), { recursive: true });
  fs.writeFileSync(RESULTS_PATH, JSON.stringify(results, null, 2) + "\n");
  console.log(`\nResults written to ${path.relative(process.cwd(), RESULTS_PATH)}`);
  return targets.some((t) => t.pass === false) ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exit(1);
  },
);
