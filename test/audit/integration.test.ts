// The audit log as the running service writes it: decisions and
// administrative changes, paged through the API, and verified by the real
// `fraudctl audit verify` after tampering with the real SQLite file.
import fs from "node:fs";
import path from "node:path";
import Database from "../../src/store/sqlite-driver.cjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { entryHash } from "../../src/audit/entry.js";
import { AUDIT_KEY_FILE, AuditSigner, importPublicKeyPem, verifyHashSignature } from "../../src/audit/signer.js";
import { ManualClock } from "../helpers/clock.js";
import { botAttack } from "../helpers/inputs.js";
import { runFraudctl } from "../helpers/process.js";
import { startTestServer, tempDir, type TestServer } from "../helpers/server.js";

interface EntryJson { seq: string; id: string; at: string; environment: string; actor: string; action: string; subject: string; data: Record<string, unknown>; body: string; prevHash: string; hash: string; signature: string }

describe("audit log of the running service", () => {
  const clock = new ManualClock();
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ clock, env: { FRAUD_WEBHOOK_ALLOW_PRIVATE: "true" } });
    // Background tasks run when the tests drain the queue, not on their own.
    await server.app.outbox.stop();
  });
  afterAll(() => server.close());

  async function entries(key: string, query = ""): Promise<{ status: number; entries: EntryJson[]; count: number }> {
    const res = await fetch(`${server.url}/api/v1/audit-logs${query}`, { headers: { "x-api-key": key } });
    const json = (await res.json()) as { data?: { entries: EntryJson[]; count: number } };
    return { status: res.status, entries: json.data?.entries ?? [], count: json.data?.count ?? 0 };
  }

  it("records decisions, key, case and webhook changes, each signed and chained, and pages through them", async () => {
    const account = server.createAccount("Audited");
    const secret = account.keys.test.secret;
    const rotated = server.app.keys.rotate(account.keys.live.secret);
    server.app.keys.revoke(rotated.record.id);
    const post = (url: string, body: unknown, method = "POST") =>
      fetch(`${server.url}${url}`, { method, headers: { "content-type": "application/json", "x-api-key": secret }, body: JSON.stringify(body) });
    const decided = (await (await post("/api/v1/decide", { userId: "mallory", action: "signup", ...botAttack("185.220.101.45") })).json()) as { data: { score: number } };
    expect(decided.data.score).toBeGreaterThanOrEqual(80);
    await server.app.settled();
    const [opened] = (await (await fetch(`${server.url}/api/v1/cases`, { headers: { "x-api-key": secret } })).json() as { data: { cases: Array<{ id: string }> } }).data.cases;
    await post(`/api/v1/cases/${opened?.id}`, { status: "investigating", note: "looking" }, "PATCH");
    const created = (await (await post("/api/v1/webhooks/endpoints", { url: "http://127.0.0.1:9/hook" })).json()) as { data: { webhook: { id: string }; secret: string } };

    const page = await entries(secret, "?limit=100");
    expect(page.status).toBe(200);
    const keyId = server.app.keys.find(secret)?.id;
    const actions = page.entries.map((e) => `${e.action} ${e.actor}`);
    // The decision's entry and its case's follow the answer, written together (decision first).
    expect([...actions.slice(0, 3), ...actions.slice(3, 5).sort(), ...actions.slice(5)]).toEqual([
      "account.created system",
      "key.created system",
      "key.created system",
      "case.created system",
      `decision.made ${keyId}`,
      `case.updated ${keyId}`,
      `webhook.created ${keyId}`,
    ]);
    // Live keys, rotation and revocation belong to the live environment.
    expect((await entries(rotated.key)).status).toBe(401); // revoked at once
    const liveKey = server.app.keys.issue({ accountId: account.account.id, environment: "live", kind: "secret" }).key;
    expect((await entries(liveKey, "?action=key.revoked")).entries.map((e) => e.subject)).toEqual([rotated.record.id]);
    expect((await entries(liveKey, "?action=key.rotated")).entries[0]?.data).toMatchObject({ replacedBy: rotated.record.id });

    const publicKey = importPublicKeyPem(AuditSigner.loadOrCreate(server.dataDir).exportPublicKeyPem());
    for (const entry of page.entries) {
      expect(entry.hash).toBe(entryHash(entry.prevHash, entry.body));
      expect(verifyHashSignature(publicKey, entry.hash, entry.signature)).toBe(true);
      expect(JSON.parse(entry.body)).toMatchObject({ id: entry.id, action: entry.action, data: entry.data });
    }
    const decision = page.entries.find((e) => e.action === "decision.made");
    expect(decision?.data).toMatchObject({ decision: "deny", userId: "mallory", score: decided.data.score });
    const bodies = page.entries.map((e) => e.body).join("\n");
    expect(bodies).not.toContain(created.data.secret);
    expect(bodies).not.toContain(secret);

    const second = await entries(secret, "?limit=2&offset=1");
    expect(second.entries.map((e) => e.id)).toEqual(page.entries.slice(1, 3).map((e) => e.id));
    expect(second.count).toBe(2);
    expect((await entries(secret, "?action=webhook.created")).entries.map((e) => e.subject)).toEqual([created.data.webhook.id]);
    // Another account sees none of it.
    expect((await entries(server.createAccount().keys.test.secret, "?action=webhook.created")).count).toBe(0);
    const noAudit = server.app.keys.issue({ accountId: account.account.id, environment: "test", kind: "secret", permissions: ["cases:read"] }).key;
    expect((await entries(noAudit)).status).toBe(403);
  });

  it("writes one decision.made entry per decision, right after the answer, from a task committed with the decision", async () => {
    const account = server.createAccount();
    const response = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": account.keys.test.secret },
      body: JSON.stringify({ userId: "u", action: "login", ip: "81.2.69.160" }),
    });
    const { data } = (await response.json()) as { data: { evidenceId: string } };
    await server.app.settled();
    const row = server.app.db
      .prepare("SELECT subject, at, body FROM audit_log WHERE action = 'decision.made' AND account_id = ?")
      .get(account.account.id) as { subject: string; at: number; body: string };
    expect(row.subject).toMatch(/^dec_/);
    expect(JSON.parse(row.body)).toMatchObject({ data: { evidenceId: data.evidenceId, userId: "u", action: "login" } });
    // Stamped with the decision's time, not the moment it was written.
    const decision = server.app.db.prepare("SELECT created_at FROM decisions WHERE id = ?").get(row.subject) as { created_at: number };
    expect(row.at).toBe(decision.created_at);
    // The follow-up task is gone once carried out.
    expect(server.app.db.prepare("SELECT count(*) AS n FROM outbox WHERE account_id = ?").get(account.account.id)).toEqual({ n: 0 });

    // Carried out again (a crash after the entry, before the task's removal), it writes nothing more.
    const followUp = { audit: { accountId: account.account.id, environment: "test", actor: "key_x", action: "decision.made", subject: row.subject, data: {}, at: decision.created_at }, caseEvents: [] };
    server.app.db
      .prepare("INSERT INTO outbox (kind, account_id, environment, payload, status, next_attempt_at, created_at, updated_at) VALUES ('decision.follow-up', ?, 'test', ?, 'pending', 0, 0, 0)")
      .run(account.account.id, JSON.stringify({ followUps: [followUp] }));
    await server.app.settled();
    expect((await entries(account.keys.test.secret, "?action=decision.made")).count).toBe(1);
    expect(server.app.db.prepare("SELECT count(*) AS n FROM outbox WHERE account_id = ?").get(account.account.id)).toEqual({ n: 0 });
  });
});

describe("policies against the signed audit log", () => {
  it("names a policy changed in the database behind the service's back, or restored after its deletion", async () => {
    const server = await startTestServer();
    try {
      const { keys } = server.createAccount("Policies");
      const create = async (name: string) => {
        const res = await fetch(`${server.url}/api/v1/policies`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": keys.live.secret },
          body: JSON.stringify({ name, status: "active", rules: [{ condition: "amount > 1000", action: "deny" }] }),
        });
        return ((await res.json()) as { id: string }).id;
      };
      const kept = await create("Large payments");
      const gone = await create("Short-lived");
      const vanished = await create("Deny list check");
      expect((await fetch(`${server.url}/api/v1/policies/${gone}`, { method: "DELETE", headers: { "x-api-key": keys.live.secret } })).status).toBe(204);
      const env = { FRAUD_DATA_DIR: server.dataDir };
      expect((await runFraudctl(["audit", "verify"], env)).code).toBe(0);

      const db = server.app.db;
      const stored = db.prepare("SELECT * FROM policies WHERE id = ?").get(kept) as Record<string, unknown>;
      const removed = db.prepare("SELECT * FROM policies WHERE id = ?").get(vanished) as Record<string, unknown>;
      db.prepare("UPDATE policies SET rules = replace(rules, '1000', '1000000') WHERE id = ?").run(kept);
      db.prepare("DELETE FROM policies WHERE id = ?").run(vanished);
      db.prepare("INSERT INTO policies SELECT ?, account_id, environment, name, description, status, rules, actions, priority, version, created_at, updated_at FROM policies WHERE id = ?").run(gone, kept);
      const tampered = await runFraudctl(["audit", "verify"], env);
      expect(tampered.code).toBe(1);
      expect(tampered.stdout).toMatch(/audit log intact/);
      expect(tampered.stdout).toMatch(new RegExp(`policy ${kept} .*DOES NOT MATCH the audit log: its content differs`));
      expect(tampered.stdout).toMatch(new RegExp(`policy ${gone} .*DOES NOT MATCH the audit log: it was deleted`));
      expect(tampered.stdout).toMatch(new RegExp(`policy ${vanished} .*DOES NOT MATCH the audit log: .*no longer holds it`));
      expect(tampered.stdout).toMatch(/^3 stored policies do not match the log: changed behind the service's back$/m);
      const json = JSON.parse((await runFraudctl(["audit", "verify", "--json"], env)).stdout) as { ok: boolean; policyProblems: Array<{ policyId: string }> };
      expect(json.ok).toBe(false);
      expect(json.policyProblems.map((p) => p.policyId).sort()).toEqual([kept, gone, vanished].sort());
      // Put back as it was, it matches again.
      db.prepare("DELETE FROM policies WHERE id = ?").run(gone);
      db.prepare("UPDATE policies SET rules = ? WHERE id = ?").run(stored.rules, kept);
      db.prepare(`INSERT INTO policies (${Object.keys(removed).join(", ")}) VALUES (${Object.keys(removed).map(() => "?").join(", ")})`).run(...Object.values(removed));
      expect((await runFraudctl(["audit", "verify"], env)).code).toBe(0);
    } finally {
      await server.close();
    }
  }, 60_000);
});

describe("fraudctl audit", () => {
  const dataDir = tempDir();
  const env = { FRAUD_DATA_DIR: dataDir, USER: "analyst" };
  afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

  beforeAll(async () => {
    const created = await runFraudctl(["accounts", "create", "--name", "Acme", "--json"], env);
    const { keys } = JSON.parse(created.stdout) as { keys: { live: { secret: string } } };
    expect((await runFraudctl(["keys", "rotate", keys.live.secret], env)).code).toBe(0);
    expect((await runFraudctl(["keys", "revoke", keys.live.secret], env)).code).toBe(0);
  }, 30_000);

  /** A copy of the data directory, tampered with by SQL as someone holding the file could. */
  function tampered(sql: string): string {
    const copy = tempDir();
    fs.cpSync(dataDir, copy, { recursive: true });
    const db = new Database(path.join(copy, "fraud.db"));
    db.exec("DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete;");
    db.exec(sql);
    db.close();
    return copy;
  }

  function rows(dir = dataDir): Array<{ seq: number; id: string; action: string; actor: string }> {
    const db = new Database(path.join(dir, "fraud.db"), { readonly: true });
    try {
      return db.prepare("SELECT seq, id, action, actor FROM audit_log ORDER BY seq").all() as Array<{ seq: number; id: string; action: string; actor: string }>;
    } finally {
      db.close();
    }
  }

  it("records the command line's changes under the operating-system user and verifies an intact log", async () => {
    expect(rows().map((r) => `${r.action} ${r.actor}`)).toEqual([
      "account.created cli:analyst",
      ...Array.from({ length: 4 }, () => "key.created cli:analyst"),
      "key.rotated cli:analyst",
      "key.revoked cli:analyst",
    ]);
    const verified = await runFraudctl(["audit", "verify"], env);
    expect(verified.code).toBe(0);
    expect(verified.stdout).toMatch(/audit log intact: 7 entries/);
    const head = /head: (\d+:[0-9a-f]{64})/.exec(verified.stdout)?.[1];
    expect(head).toMatch(/^7:/);

    const exported = await runFraudctl(["audit", "export-key"], env);
    expect(exported.stdout).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    const keyFile = path.join(dataDir, "exported.pem");
    fs.writeFileSync(keyFile, exported.stdout);
    const withKey = await runFraudctl(["audit", "verify", "--public-key", keyFile, "--expected-head", head ?? "", "--json"], env);
    expect(withKey.code).toBe(0);
    expect(JSON.parse(withKey.stdout)).toMatchObject({ ok: true, checked: 7 });
  }, 30_000);

  it("checks a copy of the log without its private key against the exported public key, and never makes a new key for it", async () => {
    const exported = await runFraudctl(["audit", "export-key"], env);
    const copy = tampered("SELECT 1");
    const keyFile = path.join(copy, "exported.pem");
    fs.writeFileSync(keyFile, exported.stdout);
    fs.rmSync(path.join(copy, AUDIT_KEY_FILE));
    try {
      const withKey = await runFraudctl(["audit", "verify", "--public-key", keyFile], { FRAUD_DATA_DIR: copy });
      expect(withKey.code).toBe(0);
      expect(withKey.stdout).toMatch(/audit log intact: 7 entries/);
      // A new key would sign the next entries with a key no verifier knows: the commands that need it refuse,
      // and those that do not (listing) still work.
      expect((await runFraudctl(["accounts", "list"], { FRAUD_DATA_DIR: copy })).code).toBe(0);
      for (const args of [["audit", "verify"], ["audit", "export-key"], ["accounts", "create", "--name", "Signed"]]) {
        const refused = await runFraudctl(args, { FRAUD_DATA_DIR: copy });
        expect(refused.code, args.join(" ")).toBe(1);
        expect(refused.stderr, args.join(" ")).toContain(`fraudctl: no audit signing key at ${path.join(copy, AUDIT_KEY_FILE)}, though the audit log has entries: restore the file from its backup`);
      }
      const serve = await runFraudctl(["serve"], { FRAUD_DATA_DIR: copy, PORT: "0", HOST: "127.0.0.1" });
      expect(serve.code).toBe(1);
      expect(serve.stderr).toContain("no audit signing key at");
      expect(fs.existsSync(path.join(copy, AUDIT_KEY_FILE))).toBe(false);

      // A key file that is no public key is a wrong argument (2), not a broken log (1).
      fs.writeFileSync(path.join(copy, "garbage.pem"), "not a key\n");
      for (const [file, message] of [
        [path.join(copy, "garbage.pem"), /--public-key .*garbage\.pem is not an Ed25519 public key in PEM/],
        [path.join(copy, "missing.pem"), /--public-key .*missing\.pem cannot be read: ENOENT/],
      ] as const) {
        const result = await runFraudctl(["audit", "verify", "--public-key", file], { FRAUD_DATA_DIR: copy });
        expect(result.code, file).toBe(2);
        expect(result.stderr, file).toMatch(message);
      }
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  }, 60_000);

  it("names the first altered, deleted, inserted or reordered entry and exits 1", async () => {
    const third = rows()[2]?.id ?? "";
    const cases: Array<[string, string, RegExp]> = [
      ["altered", "UPDATE audit_log SET body = replace(body, 'key.created', 'key.revoked'), action = 'key.revoked' WHERE seq = 3", new RegExp(`ALTERED at seq 3 \\(entry ${third}\\)`)],
      ["deleted", "DELETE FROM audit_log WHERE seq = 3", /DELETED at seq 3 .*seq 3 .* is missing/],
      [
        "inserted",
        `UPDATE audit_log SET seq = seq + 100 WHERE seq >= 3; UPDATE audit_log SET seq = seq - 99 WHERE seq >= 103;
         INSERT INTO audit_log (seq, id, at, actor, action, body, prev_hash, hash, signature)
           VALUES (3, 'aud_forged', 0, 'cli', 'key.created', '{}', '${"0".repeat(64)}', '${"1".repeat(64)}', '${"2".repeat(128)}')`,
        /INSERTED at seq 3 \(entry aud_forged\)/,
      ],
      ["reordered", "UPDATE audit_log SET seq = -1 WHERE seq = 3; UPDATE audit_log SET seq = 3 WHERE seq = 4; UPDATE audit_log SET seq = 4 WHERE seq = -1", /REORDERED at seq 3/],
    ];
    for (const [kind, sql, expected] of cases) {
      const dir = tampered(sql);
      try {
        const result = await runFraudctl(["audit", "verify"], { FRAUD_DATA_DIR: dir });
        expect(result.code, kind).toBe(1);
        expect(result.stdout, kind).toMatch(expected);
        expect(result.stdout, kind).toMatch(/2 entries before it are intact/);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
  }, 60_000);

  it("refuses a recorded head whose seq no entry can have, as a wrong argument", async () => {
    // 2^53 + 1 reads as 2^53: the head checked would not be the one typed.
    const result = await runFraudctl(["audit", "verify", "--expected-head", `9007199254740993:${"a".repeat(64)}`], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--expected-head must be SEQ:HASH/);
    expect(result.stdout).toBe("");
  }, 30_000);

  it("detects a cut tail against a recorded head", async () => {
    const verified = await runFraudctl(["audit", "verify"], env);
    const head = /head: (\d+:[0-9a-f]{64})/.exec(verified.stdout)?.[1] ?? "";
    const dir = tampered("DELETE FROM audit_log WHERE seq >= 6");
    try {
      expect((await runFraudctl(["audit", "verify"], { FRAUD_DATA_DIR: dir })).code).toBe(0);
      const anchored = await runFraudctl(["audit", "verify", "--expected-head", head], { FRAUD_DATA_DIR: dir });
      expect(anchored.code).toBe(1);
      expect(anchored.stdout).toMatch(/DELETED at seq 6/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
