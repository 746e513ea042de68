import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import { publicClientNetwork } from "../engine/index.js";
import type { Logger } from "../log.js";
import { normalizeListEntry } from "../policies/lists.js";
import type { Db } from "../store/database.js";
import type { ListRepository } from "../store/lists.js";
import { RepairLog } from "../store/repairs.js";
import type { Tenant } from "../store/tenant.js";
import { emailEntity } from "./entities.js";

/**
 * Fraud-graph keys an earlier release stored that their entity may no longer have, each kind with the repair
 * that gives them their key now (its name in `repairs_done`, migration 13: it runs once per database) and the
 * e-mail list entries it respells, if any. SQL picks the candidates, the function {@link CURRENT_KEY} the key
 * each has now.
 */
const STALE_GRAPH_KEYS = [
  {
    // 2026-11-21: an IPv6 address's own key, which is now its /64's (or, for a NAT64 address, its IPv4
    // client's), and an e-mail whose domain was spelt in punycode or with compatibility forms, which now has
    // one spelling (a domain of plain ASCII with no punycode label is its own spelling, but for a final dot,
    // dropped since 2026-11-22, which the repair does not look for: rare, and left as stored).
    repair: "entity-keys-ipv6-network-and-email-domain",
    where: `((entity LIKE 'i:%:%' AND entity NOT LIKE '%/64') OR (entity LIKE 'e:%' AND (entity LIKE '%xn--%' OR entity GLOB '*[^ -~]*')))`,
    listEntries: "emailDomains",
  },
  {
    // An e-mail's own key, which is now its mailbox's (emailEntity): one with a +tag, or a Gmail address,
    // whose dots and googlemail.com spelling the mailbox drops. List entries stay addresses.
    repair: "email-keys-mailbox",
    where: `(entity LIKE 'e:%+%' OR entity LIKE 'e:%@gmail.com' OR entity LIKE 'e:%@googlemail.com')`,
  },
] as const satisfies ReadonlyArray<{ repair: string; where: string; listEntries?: "emailDomains" }>;
/**
 * List entries an earlier release stored in a spelling they no longer have: of which kind, which (SQL picks
 * the candidates, normalizeListEntry their spelling now), why they changed, and, for those respelled in a
 * repair of their own, its name in `repairs_done`.
 */
const STALE_LIST_ENTRIES = {
  emailDomains: {
    kind: "email",
    where: `(e.value LIKE '%xn--%' OR e.value GLOB '*[^ -~]*')`,
    reason: "e-mail entries given the one spelling of their domain (punycode, Unicode and fullwidth forms are one)",
  },
  ipHostRanges: {
    kind: "ip",
    where: `(e.value LIKE '%/32' OR e.value LIKE '%/128')`,
    reason: "ranges of one address stored as that address (81.2.69.161/32 is 81.2.69.161)",
    repair: "list-entries-ip-host-ranges-as-addresses",
  },
  ipNat64Addresses: {
    kind: "ip",
    where: `(e.value LIKE '64:ff9b::%' AND e.value NOT LIKE '%/%')`,
    reason: "NAT64 addresses stored as the IPv4 client they carry (64:ff9b::5102:45a1 is 81.2.69.161)",
    repair: "list-entries-ip-nat64-as-ipv4",
  },
} as const satisfies Record<string, { kind: "email" | "ip"; where: string; reason: string; repair?: string }>;
/** The SQL function the repair registers on the connection: a stored key's current form. */
const CURRENT_KEY = "fraud_current_entity_key";

/** The key the entity of a stored key has now; the key itself when it has no other. */
function currentKey(key: string): string {
  const tag = key.slice(0, 2);
  const value = key.slice(2);
  if (tag === "i:") {
    const network = publicClientNetwork(value);
    return network === "" ? key : `i:${network}`;
  }
  return tag === "e:" ? `e:${emailEntity(value)}` : key;
}

interface Deps {
  db: Db;
  lists: ListRepository;
  audit: AuditTrail;
  clock: Clock;
  logger: Logger;
}

/**
 * Gives the fraud graph's edges and labels, and e-mail list entries, the keys
 * their entities have now, once per database. Without it, a fraud label on an
 * IPv6 address, an internationalised e-mail or a +tag or Gmail dot spelling of
 * a mailbox given before would no longer be found (labels never age out), and
 * a list entry so spelt could no longer be removed by the value the list shows.
 * Where the new key is there already, the two rows were one entity all along
 * and become one. The velocity counters are left to age out of their windows,
 * within a day.
 *
 * Set-based: the graph's rows are moved by two statements per table, not
 * through JavaScript, so memory does not grow with the graph.
 *
 * First, each in a repair of its own, IP list entries that are a range of
 * one address (`81.2.69.161/32`) or a NAT64 address (`64:ff9b::5102:45a1`)
 * become the address they stand for, which the same address added later
 * would otherwise have stood beside, and which removing the address would not
 * have removed.
 */
export function rekeyStoredEntities(deps: Deps): void {
  const { db } = deps;
  const repairs = new RepairLog(db);
  respellInRepair(deps, repairs, "ipHostRanges");
  respellInRepair(deps, repairs, "ipNat64Addresses");
  for (const stale of STALE_GRAPH_KEYS) rekeyInRepair(deps, repairs, stale);
}

/** Gives one kind of stale graph keys (and the list entries respelled with them) their keys now, once per database. */
function rekeyInRepair(deps: Deps, repairs: RepairLog, stale: (typeof STALE_GRAPH_KEYS)[number]): void {
  const { db } = deps;
  if (repairs.done(stale.repair)) return;
  // A new installation has nothing to move, and nothing to say.
  const hasGraph = db.prepare("SELECT 1 FROM graph_edges LIMIT 1").get() !== undefined;
  if (hasGraph) deps.logger.log("info", "giving stored entities the keys they have now: a one-time repair, which takes a while on a large fraud graph");
  db.function(CURRENT_KEY, { deterministic: true }, (key: unknown) => (typeof key === "string" ? currentKey(key) : key));
  const changed = { graphEdges: 0, graphLabels: 0, listEntries: 0 };
  db.transaction(() => {
    // Another process starting on the same database may have done it meanwhile.
    if (repairs.done(stale.repair)) return;
    changed.graphEdges = rekeyGraphTable(db, "graph_edges", ["account_id", "environment", "entity", "created_at", "decision_id"], stale.where);
    changed.graphLabels = rekeyGraphTable(db, "graph_labels", ["account_id", "environment", "entity", "decision_id"], stale.where);
    if ("listEntries" in stale) changed.listEntries = respellListEntries(deps, stale.listEntries);
    repairs.markDone(stale.repair, deps.clock.now());
  }).immediate();
  if (changed.graphEdges + changed.graphLabels + changed.listEntries > 0) deps.logger.log("info", "gave stored entities the keys they have now", changed);
}

/** Moves a graph table's rows whose keys `where` picks from their stale keys to their entities' keys now; the rows moved. */
function rekeyGraphTable(db: Db, table: "graph_edges" | "graph_labels", columns: readonly string[], where: string): number {
  const stale = `${where} AND ${CURRENT_KEY}(entity) <> entity`;
  const moved = columns.map((column) => (column === "entity" ? `${CURRENT_KEY}(entity)` : column)).join(", ");
  // The moved rows are stale no more: the DELETE takes only the old ones.
  db.prepare(`INSERT OR IGNORE INTO ${table} SELECT ${moved} FROM ${table} WHERE ${stale}`).run();
  return db.prepare(`DELETE FROM ${table} WHERE ${stale}`).run().changes;
}

/** Respelled values an audit entry names; past them it says how many more (a list holds up to 100,000). */
const LISTED_VALUES = 100;

function listedValues(respelled: readonly string[]): string {
  const listed = respelled.slice(0, LISTED_VALUES).join(", ");
  return respelled.length > LISTED_VALUES ? `${listed}, and ${respelled.length - LISTED_VALUES} more` : listed;
}

/** List entries respelled in a repair of their own, once per database. */
function respellInRepair(deps: Deps, repairs: RepairLog, which: "ipHostRanges" | "ipNat64Addresses"): void {
  const { repair, reason } = STALE_LIST_ENTRIES[which];
  if (repairs.done(repair)) return;
  deps.db.transaction(() => {
    if (repairs.done(repair)) return;
    const respelled = respellListEntries(deps, which);
    repairs.markDone(repair, deps.clock.now());
    if (respelled > 0) deps.logger.log("info", "respelled stored list entries", { listEntries: respelled, reason });
  }).immediate();
}

/**
 * A kind's list entries in their current spelling. Two spellings of one entry
 * become one that lasts as long as the longer-lived of them (one that never
 * expires wins). Each list changed is audited (actor `system`), as an
 * analyst's change would be.
 */
function respellListEntries(deps: Deps, which: keyof typeof STALE_LIST_ENTRIES): number {
  const { db } = deps;
  const stale = STALE_LIST_ENTRIES[which];
  const { kind } = stale;
  const rows = db
    .prepare<[string], { account_id: string; environment: string; list_name: string; value: string; expires_at: number | null; created_at: number }>(
      `SELECT e.* FROM list_entries e JOIN lists l ON l.account_id = e.account_id AND l.environment = e.environment AND l.name = e.list_name
        WHERE l.kind = ? AND ${stale.where}`,
    )
    .all(kind);
  const upsert = db.prepare(
    `INSERT INTO list_entries VALUES (@account_id, @environment, @list_name, @value, @expires_at, @created_at)
     ON CONFLICT DO UPDATE SET expires_at =
       CASE WHEN list_entries.expires_at IS NULL OR excluded.expires_at IS NULL THEN NULL ELSE max(list_entries.expires_at, excluded.expires_at) END`,
  );
  const remove = db.prepare("DELETE FROM list_entries WHERE account_id = @account_id AND environment = @environment AND list_name = @list_name AND value = @value");
  const byList = new Map<string, { tenant: Tenant; list: string; respelled: string[] }>();
  for (const row of rows) {
    const value = normalizeListEntry(kind, row.value);
    if (value === null || value === row.value) continue;
    upsert.run({ ...row, value });
    remove.run(row);
    const key = `${row.account_id}\u0000${row.environment}\u0000${row.list_name}`;
    const group = byList.get(key) ?? { tenant: { accountId: row.account_id, environment: row.environment as Tenant["environment"] }, list: row.list_name, respelled: [] };
    group.respelled.push(`${row.value} → ${value}`);
    byList.set(key, group);
  }
  let respelled = 0;
  for (const group of byList.values()) {
    deps.lists.touch(group.tenant, group.list, deps.clock.now());
    deps.audit.record({
      ...group.tenant,
      actor: "system",
      action: "list.updated",
      subject: group.list,
      data: { respelled: group.respelled.length, reason: stale.reason, values: listedValues(group.respelled) },
    });
    respelled += group.respelled.length;
  }
  return respelled;
}
