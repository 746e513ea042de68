import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { describeError } from "../src/api/errors.js";
import { AuditSigner } from "../src/audit/signer.js";
import { verifyChain } from "../src/audit/verify.js";
import { validateWeights } from "../src/engine/index.js";
import { WEIGHT_UPDATE_ATTEMPTS } from "../src/feedback/processor.js";
import { SqliteAuditStore } from "../src/store/audit.js";
import { WeightsRepository } from "../src/store/weights.js";
import { feedbackProcessorOn } from "./helpers/feedback-processor.js";
import { HUMAN_DESKTOP } from "./helpers/inputs.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

const WRITERS = 4;
const PER_WRITER = 12;
let server: TestServer;
let account: ReturnType<TestServer["createAccount"]>;

beforeAll(async () => {
  server = await startTestServer({ config: { engineThreads: 1 } });
  account = server.createAccount("Contended");
});
afterAll(() => server.close());

async function fraudDecisions(count: number, prefix: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": account.keys.live.secret },
      body: JSON.stringify({ userId: `${prefix}_${i}`, action: "signup", email: `zq${i}x${prefix}v@mailinator.com`, ip: `81.2.69.${i % 250}`, deviceId: `${prefix}_dev_${i}`, ...HUMAN_DESKTOP }),
    });
    const { data } = (await res.json()) as { data: { evidenceId: string } };
    ids.push((server.app.db.prepare("SELECT id FROM decisions WHERE evidence_id = ?").get(data.evidenceId) as { id: string }).id);
  }
  // Their signed audit entries, which feedback checks their evidence against, follow the answers.
  await server.app.settled();
  return ids;
}

type WriterResult = { ok: true; before: number; after: number } | { ok: false; code: string };

/** A writer process, loaded and waiting: `start()` lets it submit; `results` are its outcomes. */
interface Writer {
  ready: Promise<void>;
  start(): void;
  results: Promise<WriterResult[]>;
}

function spawnWriter(decisionIds: string[]): Writer {
  const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/feedback-writer.ts", server.dataDir, account.account.id, "live", ...decisionIds], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
    if (stderr.includes("ready\n")) markReady();
  });
  const results = new Promise<WriterResult[]>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(JSON.parse(stdout) as WriterResult[]) : reject(new Error(`writer exited ${code}: ${stderr}`))));
  });
  return { ready: Promise.race([ready, results.then(() => undefined)]), start: () => child.stdin.end("go\n"), results };
}

describe("weights under concurrent feedback from several processes", () => {
  it("never loses an update and never breaks the bounds", async () => {
    const decisions = await fraudDecisions(WRITERS * PER_WRITER, "contended");
    const writers = Array.from({ length: WRITERS }, (_, w) => spawnWriter(decisions.slice(w * PER_WRITER, (w + 1) * PER_WRITER)));
    // All loaded before any starts: their read-compute-write cycles overlap whatever each took to load.
    await Promise.all(writers.map((writer) => writer.ready));
    for (const writer of writers) writer.start();
    const outcomes = (await Promise.all(writers.map((writer) => writer.results))).flat();

    const applied = outcomes.filter((outcome): outcome is Extract<WriterResult, { ok: true }> => outcome.ok);
    const refused = outcomes.filter((outcome) => !outcome.ok);
    // A submission either moved the weights exactly once or was refused as contended, with nothing stored.
    expect(refused.every((outcome) => !outcome.ok && outcome.code === "CONFLICT")).toBe(true);
    expect(applied.length + refused.length).toBe(WRITERS * PER_WRITER);
    // A label moves the weights to the next version, or (pushing only against a bound) moves nothing.
    const moved = applied.filter((outcome) => outcome.after !== outcome.before);
    expect(moved.length).toBeGreaterThan(0);
    for (const outcome of moved) expect(outcome.after).toBe(outcome.before + 1);
    // Every version from 2 on was produced by exactly one submission: no two updates built on the same version.
    expect(moved.map((outcome) => outcome.after).sort((a, b) => a - b)).toEqual(Array.from({ length: moved.length }, (_, i) => i + 2));

    const row = server.app.db.prepare("SELECT version, weights FROM category_weights WHERE account_id = ? AND environment = 'live'").get(account.account.id) as { version: number; weights: string };
    expect(row.version).toBe(1 + moved.length);
    expect(validateWeights({ version: row.version, weights: JSON.parse(row.weights) as unknown }).ok).toBe(true);
    const stored = server.app.db.prepare("SELECT COUNT(*) AS n FROM feedback WHERE account_id = ?").get(account.account.id) as { n: number };
    expect(stored.n).toBe(applied.length);
    // The audit chain, appended to by every process, is intact.
    const signer = AuditSigner.loadOrCreate(server.dataDir);
    expect(verifyChain(new SqliteAuditStore(server.app.db).entries(), signer.publicKey).ok).toBe(true);
  }, 60_000);

  it(`gives up after ${WEIGHT_UPDATE_ATTEMPTS} attempts when the weights change under every one, storing nothing`, async () => {
    const [decisionId] = await fraudDecisions(1, "starved");
    const db = server.app.db;
    const weights = new WeightsRepository(db);
    let attempts = 0;
    // Another writer that always commits first: every optimistic write finds a newer version.
    const racing = Object.assign(Object.create(weights) as WeightsRepository, {
      replace: () => {
        attempts++;
        return false;
      },
    });
    const processor = feedbackProcessorOn(db, server.dataDir, racing);
    let failure: unknown;
    try {
      processor.submit({ accountId: account.account.id, environment: "live" }, "cli", { decisionId: decisionId ?? "", evidenceId: "", userId: "", actualOutcome: "fraud", confidence: 1, notes: "" });
    } catch (error) {
      failure = error;
    }
    expect(failure).toBeInstanceOf(ConnectError);
    const described = describeError(failure as ConnectError);
    expect(described).toMatchObject({ code: "CONFLICT", httpStatus: 409 });
    expect(described.detail.retryAfterSeconds).toBe(1);
    expect(attempts).toBe(WEIGHT_UPDATE_ATTEMPTS);
    expect((db.prepare("SELECT COUNT(*) AS n FROM feedback WHERE decision_id = ?").get(decisionId) as { n: number }).n).toBe(0);
    expect((db.prepare("SELECT COUNT(*) AS n FROM graph_labels WHERE decision_id = ?").get(decisionId) as { n: number }).n).toBe(0);
  });
});
