import { execFile } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./helpers/server.js";

/**
 * What an engineer debugging the service types: `buf curl` (the buf CLI the
 * project already builds its proto with) against the running server, with
 * the schema taken from server reflection, over each of its protocols.
 */
const BUF = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "node_modules", ".bin", "buf");

interface BufResult {
  code: number;
  stdout: string;
  stderr: string;
}

function bufCurl(args: string[]): Promise<BufResult> {
  return new Promise((resolve) => {
    execFile(BUF, ["curl", ...args], { timeout: 20_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

let server: TestServer;
let secret: string;

beforeAll(async () => {
  server = await startTestServer();
  secret = server.createAccount().keys.test.secret;
});
afterAll(() => server.close());

describe("buf curl over server reflection", () => {
  it("lists the services and their methods", async () => {
    const services = await bufCurl(["--protocol", "grpc", "--http2-prior-knowledge", "--list-services", server.url]);
    expect(services.code, services.stderr).toBe(0);
    expect(services.stdout.split("\n")).toEqual(expect.arrayContaining(["fraud.v1.DecisionService", "fraud.v1.PolicyService", "fraud.v1.CaseService"]));
    const methods = await bufCurl(["--protocol", "grpc", "--http2-prior-knowledge", "--list-methods", server.url]);
    expect(methods.code, methods.stderr).toBe(0);
    expect(methods.stdout.split("\n")).toEqual(
      expect.arrayContaining(["fraud.v1.DecisionService/Decide", "fraud.v1.DecisionService/Analyze", "fraud.v1.DecisionService/GetDecision"]),
    );
  });

  for (const protocol of [["grpc", "--http2-prior-knowledge"], ["connect"], ["grpcweb"]] as const) {
    it(`decides over ${protocol[0]}, the request written as JSON and encoded from the reflected schema`, async () => {
      const userId = `buf_curl_${protocol[0]}`;
      const result = await bufCurl([
        "--protocol",
        ...protocol,
        "-H",
        `authorization: Bearer ${secret}`,
        "-d",
        JSON.stringify({ action: "login", userId, ip: "81.2.69.160", email: "ana@example.com" }),
        `${server.url}/fraud.v1.DecisionService/Decide`,
      ]);
      expect(result.code, result.stderr).toBe(0);
      const answer = JSON.parse(result.stdout) as { decision: string; evidenceId: string; requestId: string; score: number };
      expect(["allow", "challenge", "deny"]).toContain(answer.decision);
      expect(answer.evidenceId).toMatch(/^evi_/);
      expect(answer.requestId).toMatch(/^req_/);
      const stored = server.app.db.prepare("SELECT evidence_id AS evidenceId, score FROM decisions WHERE user_id = ?").get(userId);
      expect(stored).toEqual({ evidenceId: answer.evidenceId, score: answer.score });
    });
  }

  it("shows the service's error: its gRPC code and message", async () => {
    const result = await bufCurl(["--protocol", "grpc", "--http2-prior-knowledge", "-d", "{}", `${server.url}/fraud.v1.DecisionService/Decide`]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/unauthenticated/);
    expect(result.stderr).toMatch(/API key/);
  });

  it("answers at once when the base URL is wrong, so reflection is looked for under a service's path", async () => {
    // The reflection stream is then called on a method the server does not have: UNIMPLEMENTED in the
    // stream's headers, not a 30 s wait for the client to end a stream it keeps open.
    const result = await bufCurl(["--protocol", "grpc", "--http2-prior-knowledge", "--list-methods", `${server.url}/fraud.v1.DecisionService`]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/unimplemented: no RPC method fraud\.v1\.DecisionService\/grpc\.reflection\./);
  });
});
