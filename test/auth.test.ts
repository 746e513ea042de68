import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getOption, type DescMessage } from "@bufbuild/protobuf";
import { validate } from "../gen/fraud/v1/options_pb.js";
import net from "node:net";
import { allContracts } from "../src/api/contract.js";
import { presentedKey } from "../src/api/interceptors.js";
import { KeyService } from "../src/auth/key-service.js";
import { ROTATION_GRACE_MS } from "../src/auth/keys.js";
import { systemClock } from "../src/clock.js";
import { ApiKeyRepository } from "../src/store/api-keys.js";
import { ManualClock } from "./helpers/clock.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

const clock = new ManualClock();
let server: TestServer;
let keys: ReturnType<TestServer["createAccount"]>["keys"];
let accountId: string;

beforeAll(async () => {
  server = await startTestServer({ clock });
  const account = server.createAccount("Acme");
  keys = account.keys;
  accountId = account.account.id;
});
afterAll(() => server.close());

/** A prefix the contract accepts for a request's `id` field (dec_, case_, ...). */
function idPrefix(input: DescMessage): string {
  const field = input.fields.find((f) => f.name === "id");
  return (field && getOption(field, validate).prefix[0]) ?? "";
}

/** Every REST endpoint of the contract, with a syntactically valid path. */
const endpoints = [...allContracts()].map((contract) => ({
  name: contract.method.name,
  verb: contract.http.method,
  // Number path parameters (a policy version) are read with the message, before the key: give them a number.
  path: contract.http.path.replace("{id}", `${idPrefix(contract.method.input)}example`).replace("{version}", "1").replace("{name}", "example_list"),
  permission: contract.access.permission,
  permissions: contract.permissions,
  anonymous: contract.access.allowAnonymous,
}));

interface Answer {
  status: number;
  /** The error's code; undefined for a success. */
  code: string | undefined;
}

/** The status and error code of one call: the body is `{}`, the ids and list name do not exist. */
async function answer(endpoint: (typeof endpoints)[number], key?: string, header: "x-api-key" | "authorization" = "x-api-key"): Promise<Answer> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key) headers[header] = header === "authorization" ? `Bearer ${key}` : key;
  const res = await fetch(`${server.url}${endpoint.path}`, {
    method: endpoint.verb,
    headers,
    body: endpoint.verb === "GET" || endpoint.verb === "DELETE" ? undefined : "{}",
  });
  const text = await res.text();
  const body = (text ? JSON.parse(text) : {}) as { error?: { code?: string } };
  return { status: res.status, code: body.error?.code };
}

async function call(endpoint: (typeof endpoints)[number], key?: string, header: "x-api-key" | "authorization" = "x-api-key"): Promise<number> {
  return (await answer(endpoint, key, header)).status;
}

const served: Answer = { status: 200, code: undefined };
const unknownId: Answer = { status: 404, code: "NOT_FOUND" };
const emptyBody: Answer = { status: 400, code: "VALIDATION_ERROR" };
/**
 * What a key allowed to call an endpoint gets for {@link answer}'s request: the reads of collections are
 * served, an id that does not exist is not found, and `{}` is not a valid body where fields are required.
 * A 404 or a 400 of the service's own validation shows the call got past the key checks.
 */
const ALLOWED: Record<string, Answer> = {
  GetStatus: served,
  ListAuditLogs: served,
  ListCases: served,
  ListDeadLetters: served,
  ListLists: served,
  ListPolicies: served,
  ListWebhooks: served,
  BacktestPolicy: unknownId,
  DeleteList: unknownId,
  DeletePolicy: unknownId,
  DeleteWebhook: unknownId,
  GetCase: unknownId,
  GetDecision: unknownId,
  GetList: unknownId,
  GetPolicy: unknownId,
  GetPolicyVersion: unknownId,
  GetWebhook: unknownId,
  ReplayDeadLetter: unknownId,
  RotateWebhookSecret: unknownId,
  UpdateCase: unknownId,
  UpdateWebhook: unknownId,
  AddListEntries: emptyBody,
  Analyze: emptyBody,
  BacktestDraftPolicy: emptyBody,
  CreatePolicy: emptyBody,
  CreateWebhook: emptyBody,
  Decide: emptyBody,
  PutList: emptyBody,
  RemoveListEntries: emptyBody,
  SubmitFeedback: emptyBody,
  SubmitIndicators: emptyBody,
  UpdatePolicy: emptyBody,
  VerifyWebhook: emptyBody,
};

describe("access per endpoint (part 5.2 of the specification)", () => {
  it("covers every endpoint of the contract", () => {
    expect(endpoints.map((e) => `${e.verb} ${e.path}`)).toEqual(
      expect.arrayContaining(["POST /api/v1/decide", "POST /api/v1/analyze", "POST /api/v1/feedback", "GET /api/v1/cases", "GET /api/v1/policies", "POST /api/v1/webhooks", "GET /api/v1/webhooks", "GET /api/v1/status"]),
    );
    // An allowed key's answer is known for each of them.
    expect(Object.keys(ALLOWED).sort()).toEqual(endpoints.map((e) => e.name).sort());
  });

  for (const endpoint of endpoints) {
    const publishableAllowed = endpoint.name === "Decide" || endpoint.name === "Analyze";
    it(`${endpoint.verb} ${endpoint.path}: no key 401${endpoint.anonymous ? " (served with public=true)" : ""}, publishable ${publishableAllowed ? "allowed" : "403"}, secret allowed`, async () => {
      // Part 5: every operation but the public status (part 4.7: public=true) needs a key.
      expect(await call(endpoint)).toBe(401);
      if (endpoint.anonymous) expect(await call({ ...endpoint, path: `${endpoint.path}?public=true` })).toBe(200);

      const allowed = ALLOWED[endpoint.name];
      const publishable = await answer(endpoint, keys.test.publishable);
      if (publishableAllowed || endpoint.anonymous) expect(publishable).toEqual(allowed);
      else expect(publishable.status).toBe(403);

      for (const secret of [keys.test.secret, keys.live.secret]) {
        expect(await answer(endpoint, secret)).toEqual(allowed);
        expect(await answer(endpoint, secret, "authorization")).toEqual(allowed);
      }
    });
  }

  it("limits a restricted secret key to the permissions it was given", async () => {
    const restricted = server.app.keys.issue({ accountId, environment: "live", kind: "secret", permissions: ["cases:read"] }).key;
    for (const endpoint of endpoints) {
      const status = await answer(endpoint, restricted);
      if (endpoint.permission === "cases:read" || endpoint.anonymous) expect(status, endpoint.name).toEqual(ALLOWED[endpoint.name]);
      else expect(status.status, endpoint.name).toBe(403);
    }
  });

  it("asks for every permission an operation names: a backtest shows stored decisions, a decision record its evidence", async () => {
    const needsMore = endpoints.filter((endpoint) => endpoint.permissions.length > 1);
    expect(needsMore.map((endpoint) => `${endpoint.name}: ${endpoint.permissions.join(" + ")}`).sort()).toEqual([
      "BacktestDraftPolicy: policies:read + decisions:read",
      "BacktestPolicy: policies:read + decisions:read",
      "GetDecision: decisions:read + evidence:read",
    ]);
    for (const endpoint of needsMore) {
      const firstOnly = server.app.keys.issue({ accountId, environment: "live", kind: "secret", permissions: endpoint.permissions.slice(0, 1) }).key;
      const all = server.app.keys.issue({ accountId, environment: "live", kind: "secret", permissions: endpoint.permissions }).key;
      expect(await answer(endpoint, firstOnly), endpoint.name).toEqual({ status: 403, code: "FORBIDDEN" });
      expect((await answer(endpoint, all)).status, endpoint.name).not.toBe(403);
    }
    const policiesOnly = server.app.keys.issue({ accountId, environment: "live", kind: "secret", permissions: ["policies:read"] }).key;
    const refusal = await fetch(`${server.url}/api/v1/policies/backtest`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": policiesOnly }, body: JSON.stringify({ rules: [{ condition: "true", action: "deny" }] }) });
    expect(((await refusal.json()) as { error: { message: string } }).error.message).toBe("this key lacks the decisions:read permission");
    // The evidence (the request as sent, its signals) is what evidence:read guards: a decision record shows it.
    const decisionsOnly = server.app.keys.issue({ accountId, environment: "live", kind: "secret", permissions: ["decisions:read"] }).key;
    const getDecision = needsMore.find((endpoint) => endpoint.name === "GetDecision");
    const record = await fetch(`${server.url}${getDecision?.path}`, { headers: { "x-api-key": decisionsOnly } });
    expect(record.status).toBe(403);
    expect(((await record.json()) as { error: { message: string } }).error.message).toBe("this key lacks the evidence:read permission");
  });

  it("refuses to issue a publishable key with a secret-only permission", async () => {
    const count = () => server.app.keys.list(accountId).length;
    const before = count();
    expect(() => server.app.keys.issue({ accountId, environment: "live", kind: "publishable", permissions: ["cases:read"] })).toThrow(/publishable keys can only hold decisions:write/);
    expect(() => server.app.keys.issue({ accountId, environment: "test", kind: "publishable", permissions: ["decisions:write", "policies:write"] })).toThrow(/publishable keys can only hold/);
    expect(count()).toBe(before);
    // A publishable key with only what publishable keys may hold is issued.
    const allowed = server.app.keys.issue({ accountId, environment: "live", kind: "publishable", permissions: ["decisions:write"] }).key;
    expect(count()).toBe(before + 1);
    const listCases = endpoints.find((e) => e.name === "ListCases");
    if (!listCases) throw new Error("missing");
    expect(await call(listCases, allowed)).toBe(403);
  });

  it("answers 401 for malformed, unknown and forged keys", async () => {
    const decide = endpoints.find((e) => e.name === "Decide");
    if (!decide) throw new Error("decide missing");
    for (const bad of ["nope", "sk_live_short", `sk_live_${"A".repeat(32)}`, keys.test.secret.replace(/^sk_test/, "sk_live"), keys.test.secret.slice(0, -1) + (keys.test.secret.endsWith("a") ? "b" : "a")]) {
      expect(await call(decide, bad), bad).toBe(401);
    }
  });
});

describe("the key a call presents", () => {
  it("is the header's value without HTTP's optional whitespace, and nothing else trimmed", () => {
    const key = "sk_test_0123456789abcdef";
    const presented = (headers: Record<string, string>) => presentedKey(new Headers(headers));
    expect(presented({ "x-api-key": ` \t${key}\t ` })).toEqual({ kind: "key", key });
    expect(presented({ authorization: `Bearer \t ${key}` })).toEqual({ kind: "key", key });
    // A no-break space (a header's byte 0xA0) is part of the value: the key so wrapped is another, unknown, key.
    expect(presented({ "x-api-key": `${key}\u00a0` })).toEqual({ kind: "key", key: `${key}\u00a0` });
    expect(presented({ authorization: `Bearer\u00a0${key}` })).toMatchObject({ kind: "malformed" });
    expect(presented({ authorization: `Bearer ${key}\u00a0` })).toMatchObject({ kind: "malformed" });
  });

  it("answers 401 for a key wrapped in no-break spaces", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      // Raw bytes: fetch would not send a byte 0xA0 in a header as it is.
      const socket = net.connect(server.port, "127.0.0.1", () =>
        socket.write(Buffer.concat([Buffer.from("GET /api/v1/cases HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: "), Buffer.from(keys.test.secret), Buffer.from([0xa0]), Buffer.from("\r\n\r\n")])),
      );
      let answer = "";
      socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
      socket.on("close", () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0)));
      socket.on("error", reject);
    });
    expect(status).toBe(401);
  });
});

describe("a secret key from a web page", () => {
  it("is refused with 403 on every operation and protocol: a request with an Origin header comes from a page", async () => {
    const origin = "https://shop.example";
    const rest = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": keys.test.secret, origin },
      body: JSON.stringify({ userId: "u_origin", action: "login" }),
    });
    expect(rest.status).toBe(403);
    expect(((await rest.json()) as { error: { message: string } }).error.message).toBe(
      "a secret key belongs on a server: this request comes from a web page (it has an Origin header), which must use a publishable key",
    );
    const connect = await fetch(`${server.url}/fraud.v1.StatusService/GetStatus`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": keys.test.secret, origin },
      body: "{}",
    });
    expect(connect.status).toBe(403);
    // A publishable key from the page is what it should use; a secret key without Origin is a server's call.
    const page = await fetch(`${server.url}/api/v1/decide`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": keys.test.publishable, origin },
      body: JSON.stringify({ userId: "u_origin", action: "login" }),
    });
    expect(page.status).toBe(200);
    const backend = await fetch(`${server.url}/api/v1/cases`, { headers: { "x-api-key": keys.test.secret } });
    expect(backend.status).toBe(200);
  });
});

describe("key rotation and revocation (part 3.3)", () => {
  it("keeps the old key working for 24 hours, then refuses it", async () => {
    const status = endpoints.find((e) => e.name === "ListCases");
    if (!status) throw new Error("missing");
    const original = server.app.keys.issue({ accountId, environment: "live", kind: "secret" }).key;
    const rotated = server.app.keys.rotate(original).key;
    expect(rotated).toMatch(/^sk_live_[0-9A-Za-z]{32}$/);
    // Working means answered in full, not merely let past authentication: a rotated key keeps its permissions.
    expect(await call(status, original)).toBe(200);
    expect(await call(status, rotated)).toBe(200);
    clock.advance(ROTATION_GRACE_MS - 1);
    expect(await call(status, original)).toBe(200);
    clock.advance(1);
    expect(await call(status, original)).toBe(401);
    expect(await call(status, rotated)).toBe(200);
  });

  it("gives a rotated restricted key a replacement with the same permissions", async () => {
    const cases = endpoints.find((e) => e.name === "ListCases");
    const policies = endpoints.find((e) => e.name === "ListPolicies");
    if (!cases || !policies) throw new Error("missing");
    const restricted = server.app.keys.issue({ accountId, environment: "live", kind: "secret", permissions: ["cases:read"] }).key;
    const replacement = server.app.keys.rotate(restricted);
    expect(replacement.record.permissions).toEqual(["cases:read"]);
    expect(await call(cases, replacement.key)).toBe(200);
    expect(await call(policies, replacement.key)).toBe(403);
  });

  it("refuses to rotate a key twice and revokes at once", async () => {
    const status = endpoints.find((e) => e.name === "ListCases");
    if (!status) throw new Error("missing");
    const key = server.app.keys.issue({ accountId, environment: "test", kind: "secret" }).key;
    server.app.keys.rotate(key);
    expect(() => server.app.keys.rotate(key)).toThrow(/already rotated/);
    const other = server.app.keys.issue({ accountId, environment: "test", kind: "secret" }).key;
    expect(await call(status, other)).toBe(200);
    server.app.keys.revoke(other);
    expect(await call(status, other)).toBe(401);
  });
});

describe("two rotations of one key at once (two fraudctl processes)", () => {
  it("lets one win: the other, which read the key before, mints nothing and says so", () => {
    const issued = server.app.keys.issue({ accountId, environment: "live", kind: "secret" });
    // What the losing process read before the winner's rotation committed.
    const stale = server.app.keys.find(issued.key);
    if (!stale) throw new Error("missing");
    server.app.keys.rotate(issued.key);
    const lagging = Object.assign(Object.create(new ApiKeyRepository(server.app.db)) as ApiKeyRepository, { findByHash: () => stale, get: () => stale });
    const loser = new KeyService(server.app.accounts, lagging, systemClock, server.app.audit, "cli:other");
    const keysBefore = server.app.keys.list(accountId).length;
    const entriesBefore = (server.app.db.prepare("SELECT COUNT(*) AS n FROM audit_log").get() as { n: number }).n;
    expect(() => loser.rotate(issued.key)).toThrow(new RegExp(`key ${issued.record.id} was rotated or revoked meanwhile`));
    expect(server.app.keys.list(accountId)).toHaveLength(keysBefore);
    expect((server.app.db.prepare("SELECT COUNT(*) AS n FROM audit_log").get() as { n: number }).n).toBe(entriesBefore);
    // Revoked meanwhile: the same.
    const other = server.app.keys.issue({ accountId, environment: "live", kind: "secret" });
    const staleOther = server.app.keys.find(other.key);
    if (!staleOther) throw new Error("missing");
    server.app.keys.revoke(other.key);
    const laggingOther = Object.assign(Object.create(new ApiKeyRepository(server.app.db)) as ApiKeyRepository, { findByHash: () => staleOther, get: () => staleOther });
    expect(() => new KeyService(server.app.accounts, laggingOther, systemClock, server.app.audit, "cli:other").rotate(other.key)).toThrow(/rotated or revoked meanwhile/);
  });
});

describe("secrets stay secret", () => {
  it("stores keys only as SHA-256 hashes", () => {
    const rows = server.app.db.prepare("SELECT * FROM api_keys").all() as Array<Record<string, unknown>>;
    const dump = JSON.stringify(rows);
    for (const key of [keys.test.secret, keys.test.publishable, keys.live.secret, keys.live.publishable]) {
      expect(dump).not.toContain(key);
      expect(dump).not.toContain(key.slice(8));
    }
    expect(rows.every((row) => /^[0-9a-f]{64}$/.test(String(row.key_hash)))).toBe(true);
  });

  it("logs only the last 4 characters of a key", async () => {
    const decide = endpoints.find((e) => e.name === "Decide");
    if (!decide) throw new Error("missing");
    await call(decide, keys.live.secret);
    await call(decide, keys.live.publishable);
    const logs = server.logs.join("\n");
    for (const key of [keys.test.secret, keys.test.publishable, keys.live.secret, keys.live.publishable]) {
      expect(logs).not.toContain(key);
      expect(logs).not.toContain(key.slice(0, -4));
    }
    expect(logs).toContain(`"key":"…${keys.live.secret.slice(-4)}"`);
  });
});
