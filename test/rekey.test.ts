// Upgrading stored entity keys: IPv6 addresses to their /64, e-mail domains to one spelling, e-mails to their
// mailbox, IP list entries of one address to the address (src/graph/rekey.ts).
import { afterAll, describe, expect, it } from "vitest";
import { AuditLog } from "../src/audit/log.js";
import { AuditSigner } from "../src/audit/signer.js";
import { entityKeys } from "../src/graph/entities.js";
import { rekeyStoredEntities } from "../src/graph/rekey.js";
import { silentLogger, type Logger } from "../src/log.js";
import { SqliteAuditStore } from "../src/store/audit.js";
import { openDatabase } from "../src/store/database.js";
import { GraphRepository } from "../src/store/graph.js";
import { ListRepository } from "../src/store/lists.js";
import { ManualClock } from "./helpers/clock.js";
import { tempDir } from "./helpers/server.js";

const dataDir = tempDir();
const db = openDatabase(dataDir);
afterAll(() => db.close());
const lists = new ListRepository(db);
const audit = new AuditLog(new SqliteAuditStore(db), AuditSigner.loadOrCreate(dataDir), new ManualClock());
const tenant = { accountId: "acct_upgraded", environment: "live" as const };

describe("an installation whose stored keys an earlier release spelt otherwise", () => {
  it("finds its fraud labels and removes its list entries by the keys its entities have now, once", () => {
    // As the earlier release stored them: an IPv6 address's own key, an e-mail's domain in punycode or fullwidth.
    const edge = db.prepare("INSERT INTO graph_edges VALUES (?, ?, ?, ?, ?)");
    const label = db.prepare("INSERT INTO graph_labels VALUES (?, ?, ?, ?)");
    for (const entity of ["i:2a02:c7f:8::1", "e:mule@xn--bcher-kva.de", "i:81.2.69.7", "u:mule"]) {
      edge.run(tenant.accountId, tenant.environment, entity, 1_000, "dec_fraud");
      label.run(tenant.accountId, tenant.environment, entity, "dec_fraud");
    }
    // Two spellings of one entity, both already stored: they become one.
    edge.run(tenant.accountId, tenant.environment, "i:2a02:c7f:8::/64", 1_000, "dec_fraud");
    lists.put(tenant, { name: "bad_emails", kind: "email", type: "deny", description: "", automatic: false }, 1_000);
    const entry = db.prepare("INSERT INTO list_entries VALUES (?, ?, 'bad_emails', ?, ?, 1000)");
    const later = Date.UTC(2030, 0, 1);
    // Two spellings of one entry: the one that never expires outlives the other's expiry.
    for (const [value, expiresAt] of [
      ["jane@xn--mnchen-3ya.de", null],
      ["bob@ｅxample.com", null],
      ["bob@example.com", later],
      ["carol@example.com", null],
      ["pct@ex%41mple.com", null],
    ] as const) {
      entry.run(tenant.accountId, tenant.environment, value, expiresAt);
    }

    // A range of one address, beside the address itself or alone; a /32 of IPv6 is a range, left as it is.
    lists.put(tenant, { name: "blocked_ips", kind: "ip", type: "deny", description: "", automatic: false }, 1_000);
    const ipEntry = db.prepare("INSERT INTO list_entries VALUES (?, ?, 'blocked_ips', ?, ?, 1000)");
    for (const [value, expiresAt] of [
      ["81.2.69.161/32", later],
      ["81.2.69.161", null],
      ["2a02:c7f:8::1/128", later],
      ["2001:db8::/32", null],
      // NAT64 addresses, one of them the address above's (81.2.69.161), become their IPv4 client; a range over
      // the prefix stays a range.
      ["64:ff9b::5102:45a1", later],
      ["64:ff9b::cb00:7109", later],
      ["64:ff9b::/96", null],
    ] as const) {
      ipEntry.run(tenant.accountId, tenant.environment, value, expiresAt);
    }

    const logged: unknown[] = [];
    const logger: Logger = { log: (_level, _message, fields) => logged.push(fields) };
    rekeyStoredEntities({ db, lists, audit, clock: new ManualClock(), logger });

    const keysOf = (table: string) => (db.prepare(`SELECT entity FROM ${table} ORDER BY entity`).all() as Array<{ entity: string }>).map((row) => row.entity);
    expect(keysOf("graph_edges")).toEqual(["e:mule@bücher.de", "i:2a02:c7f:8::/64", "i:81.2.69.7", "u:mule"]);
    expect(keysOf("graph_labels")).toEqual(["e:mule@bücher.de", "i:2a02:c7f:8::/64", "i:81.2.69.7", "u:mule"]);
    // A new request from another address of the /64, or the same mailbox spelt in Unicode, meets the label.
    const graph = new GraphRepository(db);
    expect(graph.lookup(tenant, entityKeys({ userId: "other", ip: "2a02:c7f:8::99", deviceId: "", email: "" }))).toMatchObject({ linkedToFraud: true, hops: 1 });
    expect(graph.lookup(tenant, entityKeys({ userId: "other", ip: "", deviceId: "", email: "MULE@bücher.de" }))).toMatchObject({ linkedToFraud: true, hops: 1 });
    expect(db.prepare("SELECT value, expires_at FROM list_entries WHERE list_name = 'blocked_ips' ORDER BY value").all()).toEqual([
      { value: "2001:db8::/32", expires_at: null },
      { value: "203.0.113.9", expires_at: later },
      { value: "2a02:c7f:8::1", expires_at: later },
      { value: "64:ff9b::/96", expires_at: null },
      { value: "81.2.69.161", expires_at: null },
    ]);
    expect(db.prepare("SELECT value, expires_at FROM list_entries WHERE list_name = 'bad_emails' ORDER BY value").all()).toEqual([
      { value: "bob@example.com", expires_at: null },
      { value: "carol@example.com", expires_at: null },
      { value: "jane@münchen.de", expires_at: null },
      // A domain with a % is no other spelling of anything: left as it is, and removable as shown.
      { value: "pct@ex%41mple.com", expires_at: null },
    ]);
    expect(logged).toEqual([
      { listEntries: 2, reason: expect.stringMatching(/^ranges of one address/) },
      { listEntries: 2, reason: expect.stringMatching(/^NAT64 addresses/) },
      undefined,
      { graphEdges: 2, graphLabels: 2, listEntries: 2 },
      // The mailbox repair looked, and found nothing to move.
      undefined,
    ]);
    // The lists' changes are audited, as an analyst's would be.
    const entries = db.prepare("SELECT actor, action, body FROM audit_log WHERE action = 'list.updated' ORDER BY seq").all() as Array<{ actor: string; action: string; body: string }>;
    expect(entries.map((row) => row.actor)).toEqual(["system", "system", "system"]);
    expect(JSON.parse(entries[0]?.body ?? "{}")).toMatchObject({ subject: "blocked_ips", data: { respelled: 2, values: "2a02:c7f:8::1/128 → 2a02:c7f:8::1, 81.2.69.161/32 → 81.2.69.161" } });
    expect(JSON.parse(entries[1]?.body ?? "{}")).toMatchObject({ subject: "blocked_ips", data: { respelled: 2, values: "64:ff9b::5102:45a1 → 81.2.69.161, 64:ff9b::cb00:7109 → 203.0.113.9" } });
    expect(JSON.parse(entries[2]?.body ?? "{}")).toMatchObject({ subject: "bad_emails", data: { respelled: 2, values: "bob@ｅxample.com → bob@example.com, jane@xn--mnchen-3ya.de → jane@münchen.de" } });

    // An audit entry names at most 100 of the values it respelled, and how many more.
    lists.put(tenant, { name: "imported_ips", kind: "ip", type: "deny", description: "", automatic: false }, 1_000);
    db.prepare("DELETE FROM repairs_done").run();
    for (let i = 0; i < 150; i++) db.prepare("INSERT INTO list_entries VALUES (?, ?, 'imported_ips', ?, NULL, 1000)").run(tenant.accountId, tenant.environment, `11.0.0.${i}/32`);
    rekeyStoredEntities({ db, lists, audit, clock: new ManualClock(), logger: silentLogger });
    const imported = db.prepare("SELECT body FROM audit_log WHERE action = 'list.updated' AND body LIKE '%imported_ips%'").get() as { body: string };
    const data = (JSON.parse(imported.body) as { data: { respelled: number; values: string } }).data;
    expect(data.respelled).toBe(150);
    expect(data.values).toMatch(/^11\.0\.0\.\d+\/32 → 11\.0\.0\.\d+, .*, and 50 more$/);
    expect(data.values.split(" → ")).toHaveLength(101);

    // Once per database: what is stored later, however spelt, is left alone.
    label.run(tenant.accountId, tenant.environment, "i:2a02:c7f:9::1", "dec_later");
    rekeyStoredEntities({ db, lists, audit, clock: new ManualClock(), logger: silentLogger });
    expect(keysOf("graph_labels")).toContain("i:2a02:c7f:9::1");
  });

  it("gives the +tag and Gmail dot spellings of a mailbox, which an earlier release keyed apart, the mailbox's key, once", () => {
    const mailboxTenant = { accountId: "acct_mailboxes", environment: "live" as const };
    // An installation that had the repair above: this release's start finds each spelling under its own key.
    db.prepare("DELETE FROM repairs_done WHERE name = 'email-keys-mailbox'").run();
    const edge = db.prepare("INSERT INTO graph_edges VALUES (?, ?, ?, ?, ?)");
    for (const [entity, decisionId] of [
      ["e:mule.fraud+shop1@gmail.com", "dec_shop1"],
      ["e:mulefraud@googlemail.com", "dec_google"],
      ["e:mulefraud@gmail.com", "dec_plain"],
      ["e:ops+alerts@example.com", "dec_ops"],
      ["e:first.last@example.com", "dec_other"],
    ] as const) {
      edge.run(mailboxTenant.accountId, mailboxTenant.environment, entity, 1_000, decisionId);
    }
    db.prepare("INSERT INTO graph_labels VALUES (?, ?, ?, ?)").run(mailboxTenant.accountId, mailboxTenant.environment, "e:mule.fraud+shop1@gmail.com", "dec_shop1");

    const logged: unknown[] = [];
    rekeyStoredEntities({ db, lists, audit, clock: new ManualClock(), logger: { log: (_level, _message, fields) => logged.push(fields) } });

    const rows = (table: string) =>
      db.prepare(`SELECT entity FROM ${table} WHERE account_id = ? ORDER BY entity`).all(mailboxTenant.accountId).map((row) => (row as { entity: string }).entity);
    // Other domains keep their dots; the +tag goes everywhere.
    expect(rows("graph_edges")).toEqual(["e:first.last@example.com", "e:mulefraud@gmail.com", "e:mulefraud@gmail.com", "e:mulefraud@gmail.com", "e:ops@example.com"]);
    expect(rows("graph_labels")).toEqual(["e:mulefraud@gmail.com"]);
    expect(logged).toEqual([undefined, { graphEdges: 3, graphLabels: 1, listEntries: 0 }]);
    // The fraud label on one spelling meets the next spelling of the same inbox.
    const graph = new GraphRepository(db);
    expect(graph.lookup(mailboxTenant, entityKeys({ userId: "next", ip: "", deviceId: "", email: "Mule.Fraud+shop2@googlemail.com" }))).toMatchObject({ linkedToFraud: true, hops: 1 });
  });
});
