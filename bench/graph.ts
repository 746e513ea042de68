// Fraud-graph benchmark: builds a graph of a million decision-entity edges in
// a temporary SQLite database (the real schema and GraphRepository) and times
// the engine's two-hop lookup, the read every comprehensive decide makes.
//
//   node --import tsx bench/graph.ts [--edges N] [--lookups N] [--json]
//
// The graph has the shape that makes lookups expensive: hub entities (a
// carrier-NAT address, a device farm) with thousands of decisions, so the
// fan-out bound (GRAPH_FANOUT) is exercised, and 1 % of decisions labelled fraud.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { openDatabase } from "../src/store/database.js";
import { GRAPH_FANOUT, GraphRepository } from "../src/store/graph.js";
import type { Tenant } from "../src/store/tenant.js";

const { values } = parseArgs({
  options: { edges: { type: "string", default: "1000000" }, lookups: { type: "string", default: "20000" }, json: { type: "boolean" } },
  strict: true,
});
const EDGES = Number(values.edges);
const LOOKUPS = Number(values.lookups);
const ENTITIES_PER_DECISION = 5;
const DECISIONS = Math.ceil(EDGES / ENTITIES_PER_DECISION);
const FRAUD_SHARE = 0.01;
const HUBS = 20;

/** Deterministic pseudo-random numbers, so runs compare. */
let seed = 1;
const random = (): number => {
  seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
  return seed / 2 ** 31;
};
const pick = (n: number): number => Math.floor(random() * n);

/** Entities of one decision: most are drawn from large pools; 1 in 50 uses a hub IP or device. */
function decisionEntities(i: number): string[] {
  const hub = i % 50 === 0;
  return [
    `u:user_${pick(DECISIONS / 4)}`,
    `d:${hub ? `farm_${pick(HUBS)}` : `dev_${pick(DECISIONS / 3)}`}`,
    `i:${hub ? `100.64.0.${pick(HUBS)}` : `81.${pick(256)}.${pick(256)}.${pick(256)}`}`,
    `e:mail_${pick(DECISIONS / 4)}@example.com`,
    `c:card_${pick(DECISIONS / 5)}`,
  ];
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-graph-bench-"));
try {
  const db = openDatabase(dir);
  const graph = new GraphRepository(db);
  const tenant: Tenant = { accountId: "acct_bench", environment: "live" };

  const buildStart = performance.now();
  const BATCH = 5_000;
  const insertBatch = db.transaction((from: number, to: number) => {
    for (let i = from; i < to; i++) {
      const entities = decisionEntities(i);
      graph.recordEdges(tenant, `dec_${i}`, entities, 1_700_000_000_000 + i * 1_000);
      if (random() < FRAUD_SHARE) graph.label(tenant, `dec_${i}`, entities, true);
    }
  });
  for (let from = 0; from < DECISIONS; from += BATCH) insertBatch(from, Math.min(DECISIONS, from + BATCH));
  const buildMs = performance.now() - buildStart;
  const edges = (db.prepare("SELECT COUNT(*) AS n FROM graph_edges").get() as { n: number }).n;
  const labels = (db.prepare("SELECT COUNT(*) AS n FROM graph_labels").get() as { n: number }).n;

  // Requests: a mix of entities seen before (half), brand-new ones, and hubs.
  const requests = Array.from({ length: LOOKUPS }, (_, i) => {
    const seen = decisionEntities(pick(DECISIONS));
    return i % 2 === 0 ? seen : [`u:new_${i}`, seen[1] ?? "", `i:203.0.113.${i % 256}`, `e:new_${i}@example.com`];
  });
  for (const request of requests.slice(0, 2_000)) graph.lookup(tenant, request);

  const timings: number[] = [];
  let linked = 0;
  for (const request of requests) {
    const start = performance.now();
    if (graph.lookup(tenant, request).linkedToFraud) linked++;
    timings.push(performance.now() - start);
  }
  timings.sort((a, b) => a - b);
  const at = (q: number): number => Math.round((timings[Math.min(timings.length - 1, Math.floor(q * timings.length))] ?? 0) * 1000) / 1000;
  const hubTimings: number[] = [];
  for (let h = 0; h < HUBS; h++) {
    const start = performance.now();
    graph.lookup(tenant, [`d:farm_${h}`, `i:100.64.0.${h}`]);
    hubTimings.push(performance.now() - start);
  }
  const fileMb = Math.round((fs.statSync(path.join(dir, "fraud.db")).size + (fs.existsSync(path.join(dir, "fraud.db-wal")) ? fs.statSync(path.join(dir, "fraud.db-wal")).size : 0)) / 1e5) / 10;
  db.close();

  const result = {
    edges,
    decisions: DECISIONS,
    labels,
    fanout: GRAPH_FANOUT,
    buildSeconds: Math.round(buildMs / 100) / 10,
    databaseMb: fileMb,
    lookups: LOOKUPS,
    linkedShare: Math.round((linked / LOOKUPS) * 1000) / 1000,
    lookupMs: { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1) },
    hubLookupMsMax: Math.round(Math.max(...hubTimings) * 1000) / 1000,
  };
  if (values.json) process.stdout.write(JSON.stringify(result) + "\n");
  else {
    process.stdout.write(
      [
        `graph: ${result.edges} edges, ${result.decisions} decisions, ${result.labels} fraud labels, built in ${result.buildSeconds} s (${result.databaseMb} MB)`,
        `two-hop lookup over ${result.lookups} requests (fan-out ${result.fanout} decisions per entity): p50 ${result.lookupMs.p50} ms, p90 ${result.lookupMs.p90} ms, p99 ${result.lookupMs.p99} ms, max ${result.lookupMs.max} ms`,
        `hub entities (thousands of decisions each): worst lookup ${result.hubLookupMsMax} ms; ${Math.round(result.linkedShare * 1000) / 10}% of requests linked to fraud`,
      ].join("\n") + "\n",
    );
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
