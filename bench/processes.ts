// The benchmark's child processes (the service and the two echo servers) and
// what is measured on them from /proc: resident memory and CPU time. Every
// child is tracked so that any way out of the benchmark (normal end, error,
// SIGINT) can kill them; none is left listening.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

const children = new Set<ChildProcess>();

export interface Server {
  name: string;
  pid: number;
  port: number;
  /** Where its stdout and stderr go. */
  logPath: string;
}

const LISTENING = /"msg":"listening".*?"port":(\d+)/;
const START_TIMEOUT_MS = 30_000;

/**
 * Starts a server whose stdout and stderr go to `logPath` and waits for its
 * `{"msg":"listening",...,"port":N}` line. The service logs one line per
 * request; a file keeps that out of the load generator's event loop, where a
 * pipe would make the benchmark read (and pay for) every line.
 *
 * With `exitWithParent` the child gets a stdin pipe and is expected to exit on
 * its end-of-file (the echo servers do), so it dies even if the benchmark is
 * killed with SIGKILL and never runs its cleanup.
 */
export async function startServer(
  name: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  logPath: string,
  exitWithParent: boolean,
): Promise<Server> {
  const log = fs.openSync(logPath, "w");
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: [exitWithParent ? "pipe" : "ignore", log, log] });
  fs.closeSync(log);
  children.add(child);
  let exitCode: number | null | undefined;
  child.on("exit", (code, signal) => {
    exitCode = code ?? (signal === null ? null : -1);
    children.delete(child);
  });
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const output = fs.readFileSync(logPath, "utf8");
    const port = LISTENING.exec(output)?.[1];
    if (port !== undefined && child.pid !== undefined) return { name, pid: child.pid, port: Number(port), logPath };
    if (exitCode !== undefined) throw new Error(`${name} exited (${exitCode}) before listening:\n${output.slice(-2_000)}`);
    if (Date.now() > deadline) throw new Error(`${name} did not listen within ${START_TIMEOUT_MS / 1000} s:\n${output.slice(-2_000)}`);
    await sleep(50);
  }
}

/** Runs a command to completion and returns its stdout; fails with its stderr. */
export function runToCompletion(args: readonly string[], env: NodeJS.ProcessEnv): string {
  return execFileSync(process.execPath, args, { env: { ...process.env, ...env }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** SIGTERM to every child, SIGKILL to those still running after `graceMs`. */
export async function stopAll(graceMs = 3_000): Promise<void> {
  const running = [...children];
  const exits = running.map((child) => new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("exit", () => resolve()))));
  for (const child of running) child.kill("SIGTERM");
  const timer = setTimeout(killAllNow, graceMs);
  await Promise.all(exits);
  clearTimeout(timer);
}

/** Synchronous, for process 'exit' handlers where nothing asynchronous runs any more. */
export function killAllNow(): void {
  for (const child of children) child.kill("SIGKILL");
  children.clear();
}

// ---------------------------------------------------------------- /proc

const CLOCK_TICKS_PER_SECOND = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());

/** A process's or thread's `stat` line (/proc/<pid>/stat, /proc/<pid>/task/<tid>/stat): its name and user + system CPU seconds. */
function parseStat(stat: string): { name: string; cpuSeconds: number } {
  // The name (field 2, in parentheses) may contain spaces; the fields after it are fixed.
  const close = stat.lastIndexOf(")");
  const fields = stat.slice(close + 2).split(" ");
  return { name: stat.slice(stat.indexOf("(") + 1, close), cpuSeconds: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND };
}

/** User + system CPU seconds of a process, all threads included. */
function cpuSeconds(pid: number): number {
  return parseStat(fs.readFileSync(`/proc/${pid}/stat`, "utf8")).cpuSeconds;
}

/**
 * CPU seconds of each of the service's threads so far, by role: the main
 * thread ("request": HTTP, the gateway, authentication, policies), the threads
 * the service names (src/observability/thread-name.cjs: "engine", "writer",
 * "wal", ...), and "other" for the rest (V8's garbage-collection helpers,
 * libuv's pool). A thread that ended is no longer counted.
 */
function threadCpuSeconds(pid: number): Map<string, number> {
  const byRole = new Map<string, number>();
  let tids: string[];
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return byRole;
  }
  for (const tid of tids) {
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    } catch {
      continue; // ended meanwhile
    }
    const { name, cpuSeconds: seconds } = parseStat(stat);
    const role = tid === String(pid) ? "request" : name.startsWith("fraud-") ? name.slice("fraud-".length) : "other";
    byRole.set(role, (byRole.get(role) ?? 0) + seconds);
  }
  return byRole;
}

/** Busy CPU seconds of the whole machine, summed over all CPUs (/proc/stat: everything but idle and iowait). */
function machineBusySeconds(): number {
  const line = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
  const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = ticks.reduce((sum, n) => sum + n, 0);
  return (total - (ticks[3] ?? 0) - (ticks[4] ?? 0)) / CLOCK_TICKS_PER_SECOND;
}

/** A field of /proc/<pid>/status in kB (VmRSS, VmHWM). */
export function statusKb(pid: number, field: "VmRSS" | "VmHWM"): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!match) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(match[1]);
}

export interface ResourceUsage {
  /** Server CPU (user + system, every thread) per measured request, in microseconds. */
  serverCpuUsPerRequest: number;
  /** Server CPU over the measured window; 100 = one core busy. */
  serverCpuPercent: number;
  /** The same, split by the server's threads (threadCpuSeconds); empty for a server without named threads. */
  serverCpuUsByThread: Record<string, number>;
  /** Highest server resident set size seen during the run, warm-up included. */
  serverPeakRssMb: number;
  /** The benchmark process itself (the load generator); near 100 means the client, not the server, may be the limit. */
  clientCpuPercent: number;
  /** Everything else on the machine (other servers, tests, the OS); well above 0 means the run was disturbed. */
  otherCpuPercent: number;
}

const RSS_SAMPLE_MS = 100;

interface CpuSnapshot {
  wall: number;
  /** CPU seconds used so far by the server, by this process and by the whole machine. */
  server: number;
  /** The server's CPU seconds by thread role. */
  threads: Map<string, number>;
  client: number;
  machine: number;
}

/** Samples one server's RSS through a run and its CPU over the measured window. */
export class ResourceSampler {
  private peakKb: number;
  private readonly timer: NodeJS.Timeout;
  private start: CpuSnapshot;
  private end: CpuSnapshot;
  private lastServerCpu = 0;

  constructor(private readonly pid: number) {
    this.peakKb = statusKb(pid, "VmRSS");
    this.start = this.end = this.snapshot();
    this.timer = setInterval(() => this.sampleRss(), RSS_SAMPLE_MS);
  }

  // A server that dies mid-run makes /proc/<pid> vanish. Sampling then keeps
  // the last values instead of throwing from a timer, so the run ends and
  // assertRunning reports the crash with the server's log.
  private sampleRss(): void {
    try {
      this.peakKb = Math.max(this.peakKb, statusKb(this.pid, "VmRSS"));
    } catch {
      clearInterval(this.timer);
    }
  }

  measureStart(): void {
    this.start = this.snapshot();
  }

  measureEnd(): void {
    this.end = this.snapshot();
  }

  private snapshot(): CpuSnapshot {
    const client = process.cpuUsage();
    try {
      this.lastServerCpu = cpuSeconds(this.pid);
    } catch {
      // Gone: see sampleRss.
    }
    return {
      wall: performance.now(),
      server: this.lastServerCpu,
      threads: threadCpuSeconds(this.pid),
      client: (client.user + client.system) / 1e6,
      machine: machineBusySeconds(),
    };
  }

  finish(requests: number): ResourceUsage {
    this.sampleRss();
    clearInterval(this.timer);
    const wallSeconds = Math.max(1e-3, (this.end.wall - this.start.wall) / 1000);
    const serverSeconds = this.end.server - this.start.server;
    const clientSeconds = this.end.client - this.start.client;
    const otherSeconds = this.end.machine - this.start.machine - serverSeconds - clientSeconds;
    const byThread: Record<string, number> = {};
    // Only a service with named threads is worth splitting; an echo server is all "request".
    if ([...this.end.threads.keys()].some((role) => role !== "request" && role !== "other")) {
      for (const [role, seconds] of this.end.threads) {
        // A thread that ended in the window takes its time with it (a backtest thread idles out after 60 s):
        // its role shows what the others spent, at least 0.
        const used = Math.max(0, seconds - (this.start.threads.get(role) ?? 0));
        byThread[role] = requests === 0 ? 0 : (used * 1e6) / requests;
      }
    }
    return {
      serverCpuUsPerRequest: requests === 0 ? 0 : (serverSeconds * 1e6) / requests,
      serverCpuUsByThread: byThread,
      serverCpuPercent: (100 * serverSeconds) / wallSeconds,
      serverPeakRssMb: this.peakKb / 1024,
      clientCpuPercent: (100 * clientSeconds) / wallSeconds,
      // Tick rounding can make it slightly negative on a quiet machine.
      otherCpuPercent: Math.max(0, (100 * otherSeconds) / wallSeconds),
    };
  }
}

/** Fails with the end of the server's log if it is no longer running: its crash, not the benchmark, is the news. */
export function assertRunning(server: Server): void {
  try {
    process.kill(server.pid, 0);
  } catch {
    throw new Error(`${server.name} (pid ${server.pid}) is no longer running; end of its log:\n${logTail(server)}`);
  }
}

function logTail(server: Server, chars = 2_000): string {
  return fs.readFileSync(server.logPath, "utf8").slice(-chars);
}
