import { spawn } from "node:child_process";
import http from "node:http";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FRAUDCTL, runFraudctl, startServerProcess, type ServerProcess } from "./helpers/process.js";
import { AccountRepository } from "../src/store/accounts.js";
import { openDatabase } from "../src/store/database.js";
import { tempDir } from "./helpers/server.js";

const dataDir = tempDir();
const env = { FRAUD_DATA_DIR: dataDir };
let server: ServerProcess;

beforeAll(async () => {
  server = await startServerProcess(env);
});
afterAll(async () => {
  server.child.kill("SIGKILL");
  fs.rmSync(dataDir, { recursive: true, force: true });
});

async function listCases(key: string): Promise<number> {
  const res = await fetch(`${server.url}/api/v1/cases`, { headers: { "x-api-key": key } });
  await res.arrayBuffer();
  return res.status;
}

describe("first run", () => {
  it("creates a demo account on an empty data dir, its test keys in a file only the owner reads, and prints a curl line without them", async () => {
    const keysFile = path.join(dataDir, "demo-keys.json");
    const demo = JSON.parse(fs.readFileSync(keysFile, "utf8")) as { account: string; test: { publishable: string; secret: string } };
    expect(demo.account).toMatch(/^acct_/);
    expect(demo.test.publishable).toMatch(/^pk_test_[0-9A-Za-z]{32}$/);
    expect(demo.test.secret).toMatch(/^sk_test_[0-9A-Za-z]{32}$/);
    expect(fs.statSync(keysFile).mode & 0o777).toBe(0o600);
    expect(await listCases(demo.test.secret)).toBe(200);
    const output = server.output();
    // The output (which ends up in logs) names the keys by their last 4 characters only.
    expect(output).not.toContain(demo.test.secret);
    expect(output).not.toContain(demo.test.publishable);
    expect(output).toContain(`secret …${demo.test.secret.slice(-4)}`);
    expect(output).toContain(`require('${keysFile}').test.secret`);
    expect(output).toContain(`curl -s http://localhost:${server.port}/api/v1/decide`);
    // That banner is for the person at the terminal, on stderr: standard output is JSON log lines alone.
    const lines = server.stdout().split("\n").filter((line) => line !== "");
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(() => JSON.parse(line) as unknown, line).not.toThrow();
  });
});

describe("fraudctl against a running server", () => {
  let account: { account: { id: string }; keys: Record<"test" | "live", { publishable: string; secret: string }> };

  it("creates an account with a key pair per environment, usable at once", async () => {
    const result = await runFraudctl(["accounts", "create", "--name", "Acme", "--decide-rate-limit", "500", "--json"], env);
    expect(result.code).toBe(0);
    account = JSON.parse(result.stdout) as typeof account;
    expect(account.account.id).toMatch(/^acct_/);
    expect(account.keys.test.publishable).toMatch(/^pk_test_/);
    expect(account.keys.test.secret).toMatch(/^sk_test_/);
    expect(account.keys.live.publishable).toMatch(/^pk_live_/);
    expect(account.keys.live.secret).toMatch(/^sk_live_/);
    expect(await listCases(account.keys.live.secret)).toBe(200);
  });

  it("rotates a key: the new one works at once and the old one keeps working", async () => {
    const result = await runFraudctl(["keys", "rotate", account.keys.live.secret, "--json"], env);
    expect(result.code).toBe(0);
    const rotated = JSON.parse(result.stdout) as { key: string; replaces: string; oldKeyValidUntil: string };
    expect(rotated.key).toMatch(/^sk_live_/);
    const graceLeft = Date.parse(rotated.oldKeyValidUntil) - Date.now();
    expect(graceLeft).toBeGreaterThan(23 * 3600 * 1000);
    expect(graceLeft).toBeLessThanOrEqual(24 * 3600 * 1000);
    expect(await listCases(rotated.key)).toBe(200);
    expect(await listCases(account.keys.live.secret)).toBe(200);

    const byId = await runFraudctl(["keys", "rotate", rotated.replaces, "--json"], env);
    // A refusal, not a wrong command line: exit 1, without the usage text.
    expect(byId.code).toBe(1);
    expect(byId.stderr).toMatch(/already rotated/);
    expect(byId.stderr).not.toMatch(/Usage:/);
  });

  it("revokes a key by id with immediate effect", async () => {
    const listed = await runFraudctl(["keys", "list", "--account", account.account.id, "--json"], env);
    const keys = (JSON.parse(listed.stdout) as { keys: Array<{ id: string; kind: string; environment: string; key: string; status: string }> }).keys;
    for (const key of Object.values(account.keys).flatMap((pair) => Object.values(pair))) {
      expect(listed.stdout).not.toContain(key);
    }
    const testSecret = keys.find((k) => k.environment === "test" && k.kind === "secret");
    expect(testSecret?.key).toBe(`…${account.keys.test.secret.slice(-4)}`);
    // Served (and remembered by the server's key cache) before the other process revokes it.
    expect(await listCases(account.keys.test.secret)).toBe(200);
    const revoked = await runFraudctl(["keys", "revoke", testSecret?.id ?? "", "--json"], env);
    expect(revoked.code).toBe(0);
    expect(await listCases(account.keys.test.secret)).toBe(401);
  });

  it("creates restricted keys and rejects unknown permissions", async () => {
    const bad = await runFraudctl(["keys", "create", "--account", account.account.id, "--env", "live", "--type", "secret", "--permissions", "cases:read,launch:missiles"], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown permissions: launch:missiles \(known: decisions:write, decisions:read, /);
    const good = await runFraudctl(["keys", "create", "--account", account.account.id, "--env", "live", "--type", "secret", "--permissions", "cases:read,cases:read", "--json"], env);
    expect(good.code).toBe(0);
    // Named twice, held once.
    const goodId = (JSON.parse(good.stdout) as { id: string }).id;
    const keysListed = JSON.parse((await runFraudctl(["keys", "list", "--account", account.account.id, "--json"], env)).stdout) as { keys: Array<{ id: string; permissions: string[] }> };
    expect(keysListed.keys.find((k) => k.id === goodId)?.permissions).toEqual(["cases:read"]);
    const key = (JSON.parse(good.stdout) as { key: string }).key;
    expect(await listCases(key)).toBe(200);
    const policies = await fetch(`${server.url}/api/v1/policies`, { headers: { "x-api-key": key } });
    expect(policies.status).toBe(403);
    // A key that may do nothing is refused, not made.
    const none = await runFraudctl(["keys", "create", "--account", account.account.id, "--env", "live", "--type", "secret", "--permissions", " , "], env);
    expect(none.code).toBe(2);
    // A publishable key asking for what only a secret key may hold is a wrong command line too, even for an unknown account.
    for (const accountId of [account.account.id, "acct_nope"]) {
      const publishable = await runFraudctl(["keys", "create", "--account", accountId, "--env", "live", "--type", "publishable", "--permissions", "feedback:write"], env);
      expect(publishable.code, accountId).toBe(2);
      expect(publishable.stderr).toMatch(/publishable keys can only hold decisions:write; feedback:write needs a secret key/);
    }
    expect(none.stderr).toMatch(/--permissions must name at least one of: decisions:write/);
    // Listed with what each key may do: a publishable key's fixed set, not "all".
    const listed = JSON.parse((await runFraudctl(["keys", "list", "--account", account.account.id, "--json"], env)).stdout) as { keys: Array<{ kind: string; permissions: string[] | "all" }> };
    expect(listed.keys.filter((k) => k.kind === "publishable").map((k) => k.permissions)).toEqual([["decisions:write"], ["decisions:write"]]);
    expect(listed.keys.some((k) => k.kind === "secret" && k.permissions === "all")).toBe(true);
  });

  it("lists accounts with their times in ISO 8601, as keys list does", async () => {
    const listed = await runFraudctl(["accounts", "list", "--json"], env);
    expect(listed.code).toBe(0);
    const { accounts } = JSON.parse(listed.stdout) as { accounts: Array<{ id: string; name: string; createdAt: string }> };
    expect(accounts.find((a) => a.id === account.account.id)).toMatchObject({ createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) });
    const text = await runFraudctl(["accounts", "list"], env);
    expect(text.stdout).toContain(`${account.account.id}  `);
  });

  it("prints a created account or key with the fields its list entry has, the key itself in place of its last 4 characters", async () => {
    const accountCreated = await runFraudctl(["accounts", "create", "--name", "Listed", "--json"], env);
    const { account: newAccount } = JSON.parse(accountCreated.stdout) as { account: { id: string } };
    const { accounts } = JSON.parse((await runFraudctl(["accounts", "list", "--json"], env)).stdout) as { accounts: Array<{ id: string }> };
    expect(newAccount).toEqual(accounts.find((a) => a.id === newAccount.id));

    const keyCreated = await runFraudctl(["keys", "create", "--account", newAccount.id, "--env", "live", "--type", "secret", "--permissions", "cases:read", "--name", "member X", "--json"], env);
    const { key, ...created } = JSON.parse(keyCreated.stdout) as { id: string; key: string };
    expect(created).toMatchObject({ permissions: ["cases:read"], name: "member X" });
    const { keys } = JSON.parse((await runFraudctl(["keys", "list", "--account", newAccount.id, "--json"], env)).stdout) as { keys: Array<{ id: string }> };
    expect(keys.find((k) => k.id === created.id)).toEqual({ ...created, key: `…${key.slice(-4)}` });
  });

  it("names an unknown account instead of listing no keys for it, or acting on nothing", async () => {
    const result = await runFraudctl(["keys", "list", "--account", "acct_nope"], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/no account acct_nope/);
    for (const args of [
      ["dlq", "list", "--account", "acct_nope", "--env", "live"],
      ["consortium", "show", "--account", "acct_nope", "--env", "live"],
      ["consortium", "set", "--account", "acct_nope", "--env", "live", "--key", "k".repeat(40)],
      ["keys", "create", "--account", "acct_nope", "--env", "live", "--type", "secret"],
    ]) {
      const refused = await runFraudctl(args, env);
      expect(refused.code, args.join(" ")).toBe(1);
      expect(refused.stderr, args.join(" ")).toMatch(/no account acct_nope/);
      expect(refused.stderr, args.join(" ")).not.toMatch(/Usage:/);
    }
  });

  it("treats a deadline past what a timer can wait as none, without Node warning on each call", async () => {
    const created = await runFraudctl(["accounts", "create", "--name", "Distant", "--json"], env);
    const key = (JSON.parse(created.stdout) as { keys: { test: { secret: string } } }).keys.test.secret;
    for (const [name, value] of [["connect-timeout-ms", "3000000000"], ["grpc-timeout", "99999999H"]] as const) {
      const res = await fetch(`${server.url}/fraud.v1.StatusService/GetStatus`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", [name]: value, "x-api-key": key },
        body: "{}",
      });
      expect(res.status, name).toBe(200);
    }
    // connect-es would have handed the deadline to setTimeout, which fires at once and warns.
    expect(server.output()).not.toMatch(/TimeoutOverflowWarning/);
  });

  it("refuses arguments a command does not take, instead of ignoring them", async () => {
    const created = await runFraudctl(["accounts", "create", "--name", "Strict", "--json"], env);
    const account = (JSON.parse(created.stdout) as { account: { id: string } }).account.id;
    for (const [args, message] of [
      // An operator typing --port would otherwise get a server on PORT's port.
      [["serve", "--port", "19210"], /serve takes no arguments, got --port: it reads PORT, HOST, FRAUD_DATA_DIR/],
      [["reference", "build", "extra"], /reference build takes no arguments, got extra/],
      [["dlq", "list", "--account", account, "--env", "live", "extra"], /dlq list takes no IDs, got extra/],
      [["consortium", "show", "--account", account, "--env", "live", "--key", "x"], /consortium show does not take --key/],
      [["consortium", "disable", "--account", account, "--env", "live", "--json"], /consortium disable does not take --json/],
      [["dlq", "replay", "dlq_1", "--account", account, "--env", "live", "--limit", "5", "--json"], /dlq replay does not take --limit, --json/],
      [["consortium", "set", "--account", account, "--env", "live"], /consortium set needs --key KEY/],
      // What parseArgs refuses: an unknown option, an option without its value, an argument none takes.
      [["accounts", "list", "--bogus"], /Unknown option '--bogus'/],
      [["accounts", "create", "--name"], /Option '--name <value>' argument missing/],
      [["accounts", "list", "extra"], /Unexpected argument 'extra'/],
      // Numbers in decimal digits, within bounds: 1e300 would have reached the RateLimit headers as written.
      [["accounts", "create", "--name", "Big", "--decide-rate-limit", "1e300"], /--decide-rate-limit must be a whole number from 1 to 2147483647 in decimal digits, got "1e300"/],
      [["accounts", "create", "--name", "Hex", "--decide-rate-limit", "0x10"], /--decide-rate-limit must be a whole number/],
      [["dlq", "list", "--account", account, "--env", "live", "--limit", "1e1"], /--limit must be a whole number from 1 to 100 in decimal digits, got "1e1"/],
      [["dlq", "list", "--account", account, "--env", "live", "--offset", " 5"], /--offset must be a whole number from 0/],
    ] as const) {
      const result = await runFraudctl([...args], env);
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr, args.join(" ")).toMatch(message);
      // A wrong command line is answered with the usage text, whichever check found it.
      expect(result.stderr, args.join(" ")).toMatch(/Usage:/);
    }
  });

  it("answers an argument of the wrong shape as a wrong command line (2, with the usage), whatever the account; what the data refuses with 1", async () => {
    const id = account.account.id;
    const key = "k".repeat(40);
    for (const [args, message] of [
      // One of --url and --token without the other, a key too short, a URL that is not one.
      [["consortium", "set", "--account", id, "--env", "live", "--key", key, "--url", "https://hub.example.com/ingest"], /sharing needs both the URL and the token/],
      [["consortium", "set", "--account", id, "--env", "live", "--key", key, "--token", "t"], /sharing needs both the URL and the token/],
      [["consortium", "set", "--account", id, "--env", "live", "--key", "short"], /the consortium key must have at least 32 characters/],
      [["consortium", "set", "--account", "acct_nope", "--env", "live", "--key", "short"], /the consortium key must have at least 32 characters/],
      [["consortium", "set", "--account", id, "--env", "live", "--key", key, "--url", "not a url", "--token", "t"], /not an absolute URL/],
      [["consortium", "set", "--account", id, "--env", "live", "--key", key, "--url", "ftp://hub.example.com/ingest", "--token", "t"], /ftp: URLs are not allowed/],
      // Ids without their kind's prefix, which can name nothing.
      [["keys", "list", "--account", "nope"], /--account must start with acct_, got "nope"/],
      [["keys", "create", "--account", "nope", "--env", "live", "--type", "secret"], /--account must start with acct_, got "nope"/],
      [["dlq", "list", "--account", "nope", "--env", "live"], /--account must start with acct_/],
      [["dlq", "replay", "foo", "--account", id, "--env", "live"], /ID must start with dlq_, got "foo"/],
      [["dlq", "replay", "foo", "--account", "acct_nope", "--env", "live"], /ID must start with dlq_, got "foo"/],
      [["keys", "rotate", "foo"], /KEY must start with key_ or sk_ or pk_, got "foo"/],
      [["keys", "revoke", "foo"], /KEY must start with key_ or sk_ or pk_, got "foo"/],
    ] as const) {
      const result = await runFraudctl([...args], env);
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr, args.join(" ")).toMatch(message);
      expect(result.stderr, args.join(" ")).toMatch(/Usage:/);
    }
    for (const [args, message] of [
      // A URL the address guard refuses (FRAUD_WEBHOOK_ALLOW_PRIVATE is not set), ids of the right shape that name nothing.
      [["consortium", "set", "--account", id, "--env", "live", "--key", key, "--url", "https://127.0.0.1/ingest", "--token", "t"], /127\.0\.0\.1 is a loopback address/],
      [["dlq", "replay", "dlq_999999", "--account", id, "--env", "live"], /no dead letter dlq_999999/],
      [["keys", "revoke", "key_nope"], /no such key/],
    ] as const) {
      const result = await runFraudctl([...args], env);
      expect(result.code, args.join(" ")).toBe(1);
      expect(result.stderr, args.join(" ")).toMatch(message);
      expect(result.stderr, args.join(" ")).not.toMatch(/Usage:/);
    }
  }, 60_000);

  it("refuses an account or key name that is not one line of at most 200 characters, and prints one stored before escaped", async () => {
    const forged = "Evil\nacct_0Vd8FU9lhIi82Frm8rJLTK  Demo";
    for (const args of [
      ["accounts", "create", "--name", forged],
      ["keys", "create", "--account", account.account.id, "--env", "live", "--type", "secret", "--name", forged],
    ]) {
      const result = await runFraudctl(args, env);
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr, args.join(" ")).toMatch(/--name must be one line of text: it holds the control character U\+000A/);
      expect(result.stderr, args.join(" ")).toMatch(/Usage:/);
    }
    for (const [name, message] of [
      ["Acme\u2028Demo", /line separator U\+2028/],
      ["Acme\u001b[2J", /control character U\+001B/],
      ["x".repeat(201), /--name must be at most 200 characters/],
    ] as const) {
      const result = await runFraudctl(["keys", "create", "--account", account.account.id, "--env", "live", "--type", "secret", "--name", name], env);
      expect(result.code, JSON.stringify(name)).toBe(2);
      expect(result.stderr, JSON.stringify(name)).toMatch(message);
    }
    // Characters as the contract counts them: 200 emoji are 200 characters.
    expect((await runFraudctl(["accounts", "create", "--name", "😀".repeat(200)], env)).code).toBe(0);

    // What an earlier release let `accounts create` store: listed on one line, its name escaped.
    const db = openDatabase(dataDir);
    const stored = new AccountRepository(db).create(`${forged}\u2028\u009b31m`, {}, Date.now());
    db.close();
    const listed = await runFraudctl(["accounts", "list"], env);
    expect(listed.code).toBe(0);
    const { accounts } = JSON.parse((await runFraudctl(["accounts", "list", "--json"], env)).stdout) as { accounts: Array<{ id: string; name: string }> };
    const lines = listed.stdout.trimEnd().split("\n");
    // One line per account, each its own id's: no row forged.
    expect(lines.map((line) => line.split("  ")[0])).toEqual(accounts.map((a) => a.id));
    expect(lines).toContain(`${stored.id}  "Evil\\nacct_0Vd8FU9lhIi82Frm8rJLTK  Demo\\u2028\\u009b31m"`);
    expect(accounts.find((a) => a.id === stored.id)?.name).toBe(`${forged}\u2028\u009b31m`);
  }, 60_000);

  it("stops quietly when the reader of its output goes away (| head)", async () => {
    const child = spawn(process.execPath, [FRAUDCTL, "accounts", "list"], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    // The pipe's reading end closes before fraudctl writes: its write fails with EPIPE.
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    expect(stderr).toBe("");
    expect(code).toBe(0);
  });

  it("explains its usage on a wrong command", async () => {
    const result = await runFraudctl(["keys", "explode"], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/unknown keys command explode/);
    expect(result.stderr).toMatch(/Usage:/);
  });

  it("answers --help after any command with that command's usage on stdout, exit 0, doing nothing else", async () => {
    const keysBefore = (await runFraudctl(["keys", "list", "--account", account.account.id, "--json"], env)).stdout;
    for (const [args, shown, notShown] of [
      [["keys", "create", "--account", account.account.id, "--env", "live", "--type", "secret", "--help"], /^Usage:\n  fraudctl keys create --account ID/, /keys list|fraudctl serve/],
      [["accounts", "create", "--help"], /fraudctl accounts create --name NAME/, /accounts list/],
      [["dlq", "list", "--help"], /fraudctl dlq list --account ID/, /dlq replay/],
      [["audit", "verify", "--help"], /fraudctl audit verify \[--public-key FILE\]/, /export-key/],
      // A group: its commands; an unknown command of a group: the group's too.
      [["keys", "--help"], /keys list[^]*keys create[^]*keys rotate[^]*keys revoke/, /accounts/],
      [["keys", "explode", "-h"], /keys list[^]*keys revoke/, /accounts/],
      [["serve", "--help"], /^Usage:\n  fraudctl serve\n$/, /reference/],
      [["reference", "--help"], /fraudctl reference build/, /serve/],
      [["help", "consortium", "set"], /fraudctl consortium set --account ID[^]*shares\s+its fraud labels/, /consortium show/],
      // Nothing it names: the whole text.
      [["bogus", "--help"], /fraudctl — run and administer[^]*fraudctl serve[^]*consortium disable[^]*Exit codes/, /^$/],
      [["-h"], /fraudctl — run and administer/, /^$/],
    ] as const) {
      const result = await runFraudctl([...args], env);
      expect(result.code, args.join(" ")).toBe(0);
      expect(result.stdout, args.join(" ")).toMatch(shown);
      expect(result.stdout, args.join(" ")).not.toMatch(notShown);
      expect(result.stderr, args.join(" ")).toBe("");
    }
    // `keys create ... --help` created no key.
    expect((await runFraudctl(["keys", "list", "--account", account.account.id, "--json"], env)).stdout).toBe(keysBefore);
  }, 60_000);
});

describe("SIGTERM", () => {
  it("drains a request in flight, then exits cleanly", async () => {
    const created = await runFraudctl(["accounts", "create", "--name", "Drain", "--json"], env);
    const key = (JSON.parse(created.stdout) as { keys: { test: { secret: string } } }).keys.test.secret;
    const body = JSON.stringify({ payload: "{}", signature: "sha256=00", timestamp: "1", secret: "whsec_x" });
    const response = new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
      const req = http.request(`${server.url}/api/v1/webhooks`, {
        method: "POST",
        agent: new http.Agent({ keepAlive: true }),
        headers: { "content-type": "application/json", "x-api-key": key, "content-length": Buffer.byteLength(body) },
      }, (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
      });
      req.on("error", reject);
      req.write(body.slice(0, 10));
      // The request is in flight when SIGTERM arrives; its body completes afterwards.
      setTimeout(() => {
        server.child.kill("SIGTERM");
        setTimeout(() => req.end(body.slice(10)), 300);
      }, 100);
    });
    const { status, connection } = await response;
    expect(status).toBe(200); // answered by the verify operation, not dropped
    // A keep-alive client is told the connection ends with this answer, so it sends nothing more on it.
    expect(connection).toBe("close");
    expect(await server.exited).toBe(0);
    expect(server.output()).toMatch(/"msg":"stopped"/);
  });
});

describe("SIGTERM to npm start", () => {
  it("reaches the server, which shuts down cleanly: npm is what a process manager signals", async () => {
    const otherDir = tempDir();
    try {
      const started = await startServerProcess({ FRAUD_DATA_DIR: otherDir, FRAUD_SEED_DEMO: "false" }, { npmStart: true });
      started.child.kill("SIGTERM");
      expect(await started.exited).toBe(0);
      expect(started.output()).toMatch(/"msg":"stopped"/);
      // Nothing left serving the port (a server orphaned by npm's shell would still answer).
      await expect(fetch(`${started.url}/api/health/live`)).rejects.toThrow();
    } finally {
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  });
});

describe("SIGTERM with a webhook delivery that never ends", () => {
  it("exits once its grace period is over, instead of waiting out the delivery's 10 s timeout", async () => {
    const otherDir = tempDir();
    const hanging = http.createServer(() => undefined);
    await new Promise<void>((resolve) => hanging.listen(0, "127.0.0.1", resolve));
    const connected = new Promise<void>((resolve) => hanging.once("request", () => resolve()));
    try {
      const holder = await startServerProcess({ FRAUD_DATA_DIR: otherDir, FRAUD_SHUTDOWN_GRACE_MS: "500", FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" });
      const created = await runFraudctl(["accounts", "create", "--name", "Hanging", "--json"], { FRAUD_DATA_DIR: otherDir });
      const key = (JSON.parse(created.stdout) as { keys: { test: { secret: string } } }).keys.test.secret;
      const call = (path: string, body: unknown) =>
        fetch(`${holder.url}${path}`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
      const url = `http://127.0.0.1:${(hanging.address() as net.AddressInfo).port}/hook`;
      expect((await call("/api/v1/webhooks/endpoints", { url, events: ["decision.allow", "decision.challenge", "decision.deny"] })).status).toBe(201);
      expect((await call("/api/v1/decide", { userId: "u1", action: "login", ip: "81.2.69.160" })).status).toBe(200);
      await connected;
      const stopping = performance.now();
      holder.child.kill("SIGTERM");
      expect(await holder.exited).toBe(0);
      // The grace period and the outbox's last second, not the delivery's 10 s timeout.
      expect(performance.now() - stopping).toBeLessThan(5_000);
      expect(holder.output()).toMatch(/background tasks still running at the end of the shutdown grace period/);
    } finally {
      hanging.closeAllConnections();
      hanging.close();
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  }, 30_000);
});

describe("fraudctl pointed at a data directory that does not exist", () => {
  it("says so instead of creating an empty database and key there, except to create an account", async () => {
    const parent = tempDir();
    const missing = `${parent}/not-here`;
    try {
      for (const args of [["audit", "verify"], ["keys", "list"], ["dlq", "list"], ["audit", "export-key"]]) {
        const result = await runFraudctl(args, { FRAUD_DATA_DIR: missing });
        expect(result.code, args.join(" ")).toBe(1);
        expect(result.stderr).toContain(`no database at ${missing}/fraud.db: set FRAUD_DATA_DIR`);
      }
      // Wrong commands and arguments are usage errors first, and leave nothing behind either.
      for (const [args, message] of [[["keys", "explode"], /unknown keys command explode/], [["bogus"], /unknown command bogus/], [["accounts", "create"], /accounts create needs --name/]] as const) {
        const result = await runFraudctl([...args], { FRAUD_DATA_DIR: missing });
        expect(result.code, args.join(" ")).toBe(2);
        expect(result.stderr).toMatch(message);
      }
      // Nor does a request for help.
      expect((await runFraudctl(["accounts", "create", "--name", "First", "--help"], { FRAUD_DATA_DIR: missing })).code).toBe(0);
      expect(fs.existsSync(missing)).toBe(false);
      const created = await runFraudctl(["accounts", "create", "--name", "First", "--json"], { FRAUD_DATA_DIR: missing });
      expect(created.code).toBe(0);
      expect(fs.existsSync(`${missing}/fraud.db`)).toBe(true);
    } finally {
      fs.rmSync(parent, { recursive: true, force: true });
    }
  });
});

describe("fraudctl pointed at a database it cannot use", () => {
  it("names the file and FRAUD_DATA_DIR, for serve and the other commands alike, instead of SQLite's bare message", async () => {
    const otherDir = tempDir();
    try {
      fs.writeFileSync(`${otherDir}/fraud.db`, "not a database, but a file by that name\n");
      for (const args of [["keys", "list"], ["audit", "verify"], ["serve"]]) {
        const result = await runFraudctl(args, { FRAUD_DATA_DIR: otherDir, PORT: "0", HOST: "127.0.0.1" });
        expect(result.code, args.join(" ")).toBe(1);
        expect(result.stderr, args.join(" ")).toContain(`fraudctl: cannot use the database ${otherDir}/fraud.db (FRAUD_DATA_DIR ${otherDir}): file is not a database`);
      }
    } finally {
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  });
});

describe("fraudctl serve that cannot start", () => {
  it("exits with 1 and the reason when its port is taken, instead of staying up with its threads", async () => {
    const otherDir = tempDir();
    const occupant = net.createServer();
    const port = await new Promise<number>((resolve) => occupant.listen(0, "127.0.0.1", () => resolve((occupant.address() as net.AddressInfo).port)));
    try {
      const result = await runFraudctl(["serve"], { FRAUD_DATA_DIR: otherDir, PORT: String(port), HOST: "127.0.0.1" });
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/EADDRINUSE/);
    } finally {
      occupant.close();
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it("refuses a data directory another serve holds, naming it, and takes one whose server was killed", async () => {
    const otherDir = tempDir();
    try {
      const holder = await startServerProcess({ FRAUD_DATA_DIR: otherDir });
      const second = await runFraudctl(["serve"], { FRAUD_DATA_DIR: otherDir, PORT: "0", HOST: "127.0.0.1" });
      expect(second.code).toBe(1);
      expect(second.stderr).toContain(`fraudctl: the data directory ${otherDir} is in use by another fraudctl serve (pid ${holder.child.pid}): one process serves a data directory`);
      expect((await fetch(`${holder.url}/api/v1/status?public=true`)).status).toBe(200);

      // SIGKILL leaves no stale lock: the kernel drops it with the process.
      holder.child.kill("SIGKILL");
      await holder.exited;
      const next = await startServerProcess({ FRAUD_DATA_DIR: otherDir });
      next.child.kill("SIGTERM");
      expect(await next.exited).toBe(0);
    } finally {
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it("exits with 1 and the reason when its database fails it after its threads have started, leaving none running", async () => {
    const otherDir = tempDir();
    try {
      expect((await runFraudctl(["accounts", "create", "--name", "Shop"], { FRAUD_DATA_DIR: otherDir })).code).toBe(0);
      // A table gone from a database whose schema is current: the lists' statements cannot be prepared, after the
      // engine, checkpointer and their threads are up.
      const db = openDatabase(otherDir);
      db.exec("DROP TABLE list_entries");
      db.close();
      const result = await runFraudctl(["serve"], { FRAUD_DATA_DIR: otherDir, PORT: "0", HOST: "127.0.0.1" });
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/no such table: (main\.)?list_entries/);
    } finally {
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it("refuses a malformed setting before touching the data directory", async () => {
    const otherDir = tempDir();
    try {
      for (const [name, value, message] of [
        ["FRAUD_TRUSTED_PROXIES", "10.0.0.1,bogus", /FRAUD_TRUSTED_PROXIES: "bogus" is not an address or CIDR range/],
        ["FRAUD_TRUSTED_PROXIES", "10.0.0.0/33", /"10.0.0.0\/33" is not an address or CIDR range/],
        ["FRAUD_TRUSTED_PROXIES", "::ffff:10.0.0.0/8", /"::ffff:10.0.0.0\/8" holds every IPv4 address/],
        ["FRAUD_SEED_DEMO", "yes", /FRAUD_SEED_DEMO must be true or false, got "yes"/],
        ["FRAUD_WEBHOOK_ALLOW_PRIVATE", "1", /FRAUD_WEBHOOK_ALLOW_PRIVATE must be true or false/],
        ["PORT", "70000", /PORT must be a decimal integer from 0 to 65535, got "70000"/],
        // Past a timer's longest wait, Node.js would fire it after 1 ms: every decide late, no grace at all.
        ["FRAUD_COMPREHENSIVE_BUDGET_MS", "3000000000", /FRAUD_COMPREHENSIVE_BUDGET_MS must be a decimal integer from 0 to 2147483647, got "3000000000"/],
        ["FRAUD_SHUTDOWN_GRACE_MS", "3000000000", /FRAUD_SHUTDOWN_GRACE_MS must be a decimal integer from 0 to 2147483647/],
        ["FRAUD_ENGINE_THREADS", "100000", /FRAUD_ENGINE_THREADS must be a decimal integer from 1 to 64/],
        ["HOST", "no.such.host.invalid", /HOST must be an address or a name that resolves, got "no.such.host.invalid"/],
      ] as const) {
        const result = await runFraudctl(["serve"], { FRAUD_DATA_DIR: otherDir, PORT: "0", HOST: "127.0.0.1", [name]: value });
        expect(result.code, `${name}=${value}`).toBe(1);
        expect(result.stderr).toMatch(message);
      }
      expect(fs.readdirSync(otherDir)).toEqual([]);
    } finally {
      fs.rmSync(otherDir, { recursive: true, force: true });
    }
  });
});

describe("fraudctl reference build", () => {
  it("writes the reference snapshot where FRAUD_REFERENCE_SNAPSHOT_DIR says, and fails clearly where it cannot", async () => {
    const snapshotDir = tempDir("snapshot-");
    try {
      const built = await runFraudctl(["reference", "build"], { ...env, FRAUD_REFERENCE_SNAPSHOT_DIR: snapshotDir });
      expect(built.code).toBe(0);
      expect(built.stdout).toMatch(/reference tables built and snapshot written in \d+ ms/);
      expect(fs.readdirSync(snapshotDir)).toEqual(["reference-tables-v1.bin"]);

      // A directory inside a regular file cannot be created.
      const blocked = `${snapshotDir}/reference-tables-v1.bin/cache`;
      const refused = await runFraudctl(["reference", "build"], { ...env, FRAUD_REFERENCE_SNAPSHOT_DIR: blocked });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/built the reference tables but could not write their snapshot: .*(ENOTDIR|EEXIST)/);
    } finally {
      fs.rmSync(snapshotDir, { recursive: true, force: true });
    }
  }, 30_000);
});

describe("standard output that cannot be written (a log file on a full disk)", () => {
  it.skipIf(!fs.existsSync("/dev/full"))("keeps the server answering, says so once on stderr, and ends a command with exit 1", async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const { port: free } = probe.address() as net.AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    const full = fs.openSync("/dev/full", "w");
    const fullEnv = { FRAUD_DATA_DIR: tempDir() };
    try {
      const child = spawn(process.execPath, [FRAUDCTL, "serve"], { env: { ...process.env, ...fullEnv, PORT: String(port), HOST: "127.0.0.1" }, stdio: ["ignore", full, "pipe"] });
      let stderr = "";
      child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
      // Every request logs a line, and every line is lost: the server answers all the same.
      await expect.poll(async () => (await fetch(`http://127.0.0.1:${port}/api/health`).catch(() => undefined))?.status, { timeout: 15_000 }).toBe(200);
      for (let i = 0; i < 20; i++) expect((await fetch(`http://127.0.0.1:${port}/api/v1/status?public=true`)).status).toBe(200);
      child.kill("SIGTERM");
      expect(await exited).toBe(1);
      expect(stderr.match(/cannot write to standard output/g)).toHaveLength(1);

      const listed = spawn(process.execPath, [FRAUDCTL, "accounts", "list"], { env: { ...process.env, ...fullEnv }, stdio: ["ignore", full, "pipe"] });
      let listedErr = "";
      listed.stderr?.on("data", (chunk: Buffer) => (listedErr += chunk.toString()));
      expect(await new Promise((resolve) => listed.on("exit", resolve))).toBe(1);
      expect(listedErr).toMatch(/ENOSPC|cannot write to standard output/);
    } finally {
      fs.closeSync(full);
      fs.rmSync(fullEnv.FRAUD_DATA_DIR, { recursive: true, force: true });
    }
  });
});
