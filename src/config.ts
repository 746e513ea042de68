import os from "node:os";
import path from "node:path";
import { MAX_TIMER_MS } from "./clock.js";
import { parseTrustedRange } from "./server/client-ip.js";

/** Installation settings, read once from the environment at start. */
export interface Config {
  /** TCP port; 0 picks a free one (tests). */
  port: number;
  host: string;
  /** Directory of the SQLite database and installation secrets. */
  dataDir: string;
  /** Largest accepted request body in bytes (REST, Connect and gRPC alike). */
  maxBodyBytes: number;
  /** Per-installation overrides of rate-limit rules, by rule name (per window). */
  rateLimitOverrides: Record<string, number>;
  /**
   * Peers whose X-Forwarded-For header is believed. Entries are exact
   * addresses or CIDR ranges; empty means the connection address is the client.
   */
  trustedProxies: string[];
  /** How long SIGTERM waits for in-flight requests before closing connections. */
  shutdownGraceMs: number;
  /** Create a demo account on an empty database and print its test keys. */
  seedDemoAccount: boolean;
  /** Worker threads of the decision engine pool. */
  engineThreads: number;
  /** How long decide waits for the comprehensive path before answering from the fast path. */
  comprehensiveBudgetMs: number;
  /** Evaluations waiting for or in the engine before decide and analyze answer 503 SERVICE_UNAVAILABLE. */
  engineQueueLimit: number;
  /** Tor exit list (bulk exit list or exit-addresses format); reloaded when it changes. */
  torExitListPath: string | undefined;
  /** CIDR list of hosting and datacenter ranges; reloaded when it changes. */
  datacenterRangesPath: string | undefined;
  /** Directory of the compiled reference-table snapshot (FRAUD_REFERENCE_SNAPSHOT_DIR). */
  referenceSnapshotDir: string | undefined;
  /** Let webhook URLs reach private, loopback and link-local addresses (receivers on the same network, tests). */
  webhookAllowPrivate: boolean;
}

const DEFAULT_MAX_BODY_BYTES = 256 * 1024;
/**
 * The largest body limit the protocol libraries take (connect-es refuses a readMaxBytes above 2^32 - 1 when the
 * router is built, after the data directory is open): refused here, naming the variable, like any other setting.
 */
const MAX_BODY_BYTES_LIMIT = 4_294_967_295;
/** Engine threads at most: each holds its own heap and SQLite connection. */
const MAX_ENGINE_THREADS = 64;

/**
 * A whole number an operator typed (a setting, a fraudctl option), in decimal digits only and within
 * `min`..`max`; undefined otherwise. Number() would also take "0x50" (port 80), "8e3", " 8080 " or "1e300",
 * a typo bound silently.
 */
export function parseDecimalInteger(raw: string, min: number, max: number): number | undefined {
  const value = /^[0-9]+$/.test(raw) ? Number(raw) : Number.NaN;
  return Number.isSafeInteger(value) && value >= min && value <= max ? value : undefined;
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = parseDecimalInteger(raw, min, max);
  if (value === undefined) {
    const range = max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `from ${min} to ${max}`;
    throw new Error(`${name} must be a decimal integer ${range}, got "${raw}"`);
  }
  return value;
}

/** "true" or "false"; anything else is a mistake worth stopping for, not a silent default. */
function flag(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (raw === "true" || raw === "false") return raw === "true";
  throw new Error(`${name} must be true or false, got "${raw}"`);
}

/** Comma-separated trusted proxy addresses and CIDR ranges, each checked as the resolver will read it. */
function trustedRanges(env: NodeJS.ProcessEnv, name: string): string[] {
  const entries = (env[name] ?? "").split(",").map((entry) => entry.trim()).filter(Boolean);
  for (const entry of entries) {
    const range = parseTrustedRange(entry);
    if ("problem" in range) throw new Error(`${name}: ${range.problem}`);
  }
  return entries;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const rateLimitOverrides: Record<string, number> = {};
  if (env.FRAUD_ANALYZE_RATE_LIMIT) {
    rateLimitOverrides.analyze = integer(env, "FRAUD_ANALYZE_RATE_LIMIT", 30, 1);
  }
  return {
    port: integer(env, "PORT", 8080, 0, 65_535),
    host: env.HOST || "0.0.0.0",
    dataDir: path.resolve(env.FRAUD_DATA_DIR || "./data"),
    maxBodyBytes: integer(env, "FRAUD_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024, MAX_BODY_BYTES_LIMIT),
    rateLimitOverrides,
    trustedProxies: trustedRanges(env, "FRAUD_TRUSTED_PROXIES"),
    shutdownGraceMs: integer(env, "FRAUD_SHUTDOWN_GRACE_MS", 10_000, 0, MAX_TIMER_MS),
    seedDemoAccount: flag(env, "FRAUD_SEED_DEMO", true),
    // The request thread keeps a core of its own; the engine gets the rest (at least one, at most four).
    engineThreads: integer(env, "FRAUD_ENGINE_THREADS", Math.min(4, Math.max(1, os.availableParallelism() - 1)), 1, MAX_ENGINE_THREADS),
    comprehensiveBudgetMs: integer(env, "FRAUD_COMPREHENSIVE_BUDGET_MS", 50, 0, MAX_TIMER_MS),
    engineQueueLimit: integer(env, "FRAUD_ENGINE_QUEUE_LIMIT", 4096, 1),
    torExitListPath: env.FRAUD_TOR_EXIT_LIST || undefined,
    datacenterRangesPath: env.FRAUD_DATACENTER_RANGES || undefined,
    referenceSnapshotDir: env.FRAUD_REFERENCE_SNAPSHOT_DIR || undefined,
    webhookAllowPrivate: flag(env, "FRAUD_WEBHOOK_ALLOW_PRIVATE", false),
  };
}
