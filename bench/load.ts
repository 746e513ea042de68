// The one load generator every target is driven with, so that the ratios
// between the service and the bare echo servers compare servers, not clients.
//
// A Requester sends one request and reports one Outcome through a callback
// (no promise per request: the client shares two cores with the server, and
// every microsecond it spends is one the server does not get). The two loops
// on top are protocol-agnostic:
// - closedLoop keeps N requests in flight and measures throughput;
// - openLoop issues requests on a fixed schedule and measures each latency
//   from its scheduled start, so a stalled server cannot hide its backlog by
//   slowing the client down (coordinated omission).

import http from "node:http";
import { performance } from "node:perf_hooks";
import * as grpc from "@grpc/grpc-js";

export interface Outcome {
  ok: boolean;
  /** Groups failures in the report: "HTTP 501 NOT_IMPLEMENTED", "gRPC UNIMPLEMENTED", "ECONNRESET". */
  label: string;
  /** The first bytes of the failing response, for the report. */
  detail: string;
}

const OK: Outcome = { ok: true, label: "ok", detail: "" };

export interface Requester {
  send(done: (outcome: Outcome) => void): void;
  close(): void;
}

/** Generous against the latencies measured here, but keeps a hung server from hanging the benchmark. */
const REQUEST_TIMEOUT_MS = 10_000;

const DETAIL_CHARS = 240;

function failure(label: string, detail: string | Buffer): Outcome {
  return { ok: false, label, detail: detail.toString().slice(0, DETAIL_CHARS) };
}

// ---------------------------------------------------------------- HTTP/1.1

export type HttpClassifier = (res: http.IncomingMessage, body: Buffer) => Outcome;

export interface HttpTargetOptions {
  port: number;
  path: string;
  headers: Readonly<Record<string, string>>;
  /** Pre-serialised bodies, sent round-robin. */
  bodies: readonly Buffer[];
  /** Keep-alive sockets; the closed loop's concurrency, so no request waits for a socket. */
  sockets: number;
  classify: HttpClassifier;
}

/** Any 2xx is a success; otherwise the status and the service's error code, if it sent one. */
export const classifyHttpStatus: HttpClassifier = (res, body) => {
  const status = res.statusCode ?? 0;
  if (status >= 200 && status < 300) return OK;
  const code = res.headers["fraud-error-code"];
  return failure(`HTTP ${status}${typeof code === "string" ? ` ${code}` : ""}`, body);
};

/**
 * gRPC-Web answers HTTP 200 and carries the gRPC status either in the headers
 * (trailers-only responses, used for errors) or in a trailer frame at the end
 * of the body (flag 0x80, then "name:value\r\n" lines).
 */
export const classifyGrpcWeb: HttpClassifier = (res, body) => {
  if (res.statusCode !== 200) return classifyHttpStatus(res, body);
  const headerStatus = res.headers["grpc-status"];
  let status = typeof headerStatus === "string" ? headerStatus : undefined;
  let message = res.headers["grpc-message"];
  for (let offset = 0; status === undefined && offset + 5 <= body.length; ) {
    const flags = body[offset] as number;
    const length = body.readUInt32BE(offset + 1);
    if (flags & 0x80) {
      const trailers = body.subarray(offset + 5, offset + 5 + length).toString();
      status = /^grpc-status:\s*(\d+)/im.exec(trailers)?.[1];
      message = /^grpc-message:\s*(.*?)\r?$/im.exec(trailers)?.[1];
    }
    offset += 5 + length;
  }
  if (status === "0") return OK;
  const name = status === undefined ? "no grpc-status" : (grpc.status[Number(status)] ?? status);
  return failure(`gRPC-Web ${name}`, typeof message === "string" ? percentDecode(message) : body);
};

/** grpc-message is percent-encoded; a malformed one is shown as sent rather than failing the run. */
function percentDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

export function httpRequester(options: HttpTargetOptions): Requester {
  const agent = new http.Agent({ keepAlive: true, maxSockets: options.sockets });
  // Headers per body, built once: only content-length differs between them.
  const prepared = options.bodies.map((body) => ({
    body,
    headers: { ...options.headers, "content-length": String(body.length) },
  }));
  let next = 0;
  return {
    send(callback) {
      const { body, headers } = prepared[next++ % prepared.length] as (typeof prepared)[number];
      // A connection reset mid-response can fail both the request and the
      // response; a second callback would start a second lane.
      let settled = false;
      const done = (outcome: Outcome): void => {
        if (settled) return;
        settled = true;
        callback(outcome);
      };
      const req = http.request(
        { agent, host: "127.0.0.1", port: options.port, method: "POST", path: options.path, headers },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (chunk: Buffer) => chunks.push(chunk));
          res.on("end", () => done(options.classify(res, chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks))));
          res.on("error", (error: NodeJS.ErrnoException) => done(failure(error.code ?? "response error", error.message)));
        },
      );
      req.setTimeout(REQUEST_TIMEOUT_MS, () => req.destroy(Object.assign(new Error("no answer in time"), { code: "TIMEOUT" })));
      req.on("error", (error: NodeJS.ErrnoException) => done(failure(error.code ?? "request error", error.message)));
      req.end(body);
    },
    close() {
      agent.destroy();
    },
  };
}

// ---------------------------------------------------------------- gRPC

export interface GrpcTargetOptions {
  port: number;
  /** Full method path, "/fraud.v1.DecisionService/Decide". */
  method: string;
  metadata: Readonly<Record<string, string>>;
  /** Pre-serialised protobuf messages, sent round-robin. */
  bodies: readonly Buffer[];
  /** Independent HTTP/2 connections; calls are spread round-robin over them. */
  channels: number;
}

const passthrough = (bytes: Buffer): Buffer => bytes;

/** @grpc/grpc-js, the canonical client, with the messages already serialised so both servers get identical bytes. */
export function grpcRequester(options: GrpcTargetOptions): Requester {
  // Without a local subchannel pool grpc-js would share one connection between all clients to the same address.
  const clients = Array.from(
    { length: options.channels },
    () => new grpc.Client(`127.0.0.1:${options.port}`, grpc.credentials.createInsecure(), { "grpc.use_local_subchannel_pool": 1 }),
  );
  const metadataEntries = Object.entries(options.metadata);
  let next = 0;
  return {
    send(done) {
      const index = next++;
      const client = clients[index % clients.length] as grpc.Client;
      const body = options.bodies[index % options.bodies.length] as Buffer;
      // A fresh Metadata per call: grpc-js takes ownership of the object it is given.
      const metadata = new grpc.Metadata();
      for (const [key, value] of metadataEntries) metadata.set(key, value);
      client.makeUnaryRequest<Buffer, Buffer>(
        options.method,
        passthrough,
        passthrough,
        body,
        metadata,
        { deadline: Date.now() + REQUEST_TIMEOUT_MS },
        (error) => done(error ? failure(`gRPC ${grpc.status[error.code] ?? error.code}`, error.details) : OK),
      );
    },
    close() {
      for (const client of clients) client.close();
    },
  };
}

// ---------------------------------------------------------------- recording

/** Every latency of a run, kept exactly (a few MB at most) so percentiles need no bucketing. */
class LatencyRecorder {
  private values = new Float64Array(1 << 16);
  private count = 0;

  add(ms: number): void {
    if (this.count === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.count++] = ms;
  }

  summary(): LatencySummary {
    const sorted = this.values.subarray(0, this.count).sort();
    const at = (p: number): number => (this.count === 0 ? 0 : (sorted[Math.max(0, Math.ceil(p * this.count) - 1)] as number));
    let sum = 0;
    for (const value of sorted) sum += value;
    return { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1), mean: this.count === 0 ? 0 : sum / this.count };
  }
}

export interface LatencySummary {
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export interface ErrorGroup {
  label: string;
  count: number;
  sample: string;
}

export interface LoadResult {
  /** Seconds from the end of the warm-up to the last measured answer. */
  seconds: number;
  /** Answers to requests started (closed loop) or scheduled (open loop) after the warm-up. */
  requests: number;
  ok: number;
  errors: number;
  requestsPerSecond: number;
  okPerSecond: number;
  /** Milliseconds, over every answer, failed or not. */
  latency: LatencySummary;
  errorGroups: ErrorGroup[];
}

class RunRecorder {
  readonly latencies = new LatencyRecorder();
  private ok = 0;
  private errors = 0;
  private readonly groups = new Map<string, ErrorGroup>();
  private lastAnswer = 0;

  constructor(private readonly measureStart: number) {}

  record(latencyMs: number, outcome: Outcome, now: number): void {
    this.latencies.add(latencyMs);
    this.lastAnswer = Math.max(this.lastAnswer, now);
    if (outcome.ok) this.ok++;
    else this.fail(outcome);
  }

  /** A request that was never sent (open loop over its in-flight cap) still counts against the run. */
  fail(outcome: Outcome): void {
    this.errors++;
    const group = this.groups.get(outcome.label);
    if (group) group.count++;
    else this.groups.set(outcome.label, { label: outcome.label, count: 1, sample: outcome.detail });
  }

  result(): LoadResult {
    const seconds = Math.max(1e-3, (this.lastAnswer - this.measureStart) / 1000);
    const requests = this.ok + this.errors;
    return {
      seconds,
      requests,
      ok: this.ok,
      errors: this.errors,
      requestsPerSecond: requests / seconds,
      okPerSecond: this.ok / seconds,
      latency: this.latencies.summary(),
      errorGroups: [...this.groups.values()].sort((a, b) => b.count - a.count),
    };
  }
}

// ---------------------------------------------------------------- loops

export interface Phases {
  warmupMs: number;
  durationMs: number;
  /** Called once when the warm-up ends and once when the last measured answer is in (resource sampling). */
  onMeasureStart(): void;
  onMeasureEnd(): void;
}

/** `concurrency` lanes, each sending its next request as soon as the previous one is answered. */
export function closedLoop(requester: Requester, concurrency: number, phases: Phases): Promise<LoadResult> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const measureStart = t0 + phases.warmupMs;
    const end = measureStart + phases.durationMs;
    const recorder = new RunRecorder(measureStart);
    const startTimer = setTimeout(phases.onMeasureStart, phases.warmupMs);
    let lanes = concurrency;
    const lane = (): void => {
      const started = performance.now();
      if (started >= end) {
        if (--lanes === 0) {
          clearTimeout(startTimer);
          phases.onMeasureEnd();
          resolve(recorder.result());
        }
        return;
      }
      requester.send((outcome) => {
        const now = performance.now();
        if (started >= measureStart) recorder.record(now - started, outcome, now);
        lane();
      });
    };
    for (let i = 0; i < concurrency; i++) lane();
  });
}

/**
 * Requests at `rate` per second on a fixed schedule, whatever the server does.
 * Request i is due at t0 + i/rate; its latency runs from that instant, so time
 * spent queued behind a slow answer (in the agent or the timer) is counted.
 */
export function openLoop(requester: Requester, rate: number, maxInFlight: number, phases: Phases): Promise<LoadResult> {
  return new Promise((resolve) => {
    const intervalMs = 1000 / rate;
    const t0 = performance.now();
    const measureStart = t0 + phases.warmupMs;
    const total = Math.ceil((phases.warmupMs + phases.durationMs) / intervalMs);
    const recorder = new RunRecorder(measureStart);
    const startTimer = setTimeout(phases.onMeasureStart, phases.warmupMs);
    let issued = 0;
    let inFlight = 0;
    const finishIfDone = (): void => {
      if (issued === total && inFlight === 0) {
        clearTimeout(startTimer);
        phases.onMeasureEnd();
        resolve(recorder.result());
      }
    };
    const tick = (): void => {
      const now = performance.now();
      const due = Math.min(total, Math.floor((now - t0) / intervalMs) + 1);
      while (issued < due) {
        const scheduled = t0 + issued * intervalMs;
        const measured = scheduled >= measureStart;
        issued++;
        if (inFlight >= maxInFlight) {
          if (measured) recorder.fail(failure("client: in-flight cap reached", `more than ${maxInFlight} requests outstanding`));
          continue;
        }
        inFlight++;
        requester.send((outcome) => {
          inFlight--;
          const answered = performance.now();
          if (measured) recorder.record(answered - scheduled, outcome, answered);
          finishIfDone();
        });
      }
      // Sleep until the next request is due rather than spinning: a busy
      // client would steal the second core from the server it is measuring.
      if (issued < total) setTimeout(tick, Math.max(0, t0 + issued * intervalMs - performance.now()));
      else finishIfDone();
    };
    tick();
  });
}
