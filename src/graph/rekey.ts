import type { Clock } from "../clock.js";
import { canonicalEmail, publicClientNetwork } from "../engine/index.js";
import type { Logger } from "../log.js";
import { normalizeListEntry } from "../policies/lists.js";
import type { Db } from "../store/database.js";
import { RepairLog } from "../store/repairs.js";

/** Its name in `repairs_done` (migration 13): it runs once per database. */
const REPAIR = "entity-keys-ipv6-network-and-email-domain";

/**
 * Stored keys an earlier release wrote that the same entity no longer has
 * (2026-11-21): an IPv6 address's own, which is now its /64's, and an e-mail
 * whose domain was spelt in punycode or with compatibility forms, which now
 * has one spelling (canonicalEmail). SQL picks the candidates (an IPv6 key
 * that is no /64, an e-mail key with a non-ASCII character or a punycode
 * label); the rest are in their form already.
 */
const STALE_ENTITY = `((entity LIKE 'i:%:%' AND entity NOT LIKE '%/64') OR (entity LIKE 'e:%' AND (entity LIKE '%xn--%' OR entity GLOB '*[^ -~]*')))`;
const STALE_EMAIL_ENTRY = `(e.value LIKE '%xn--%' OR e.value GLOB '*[^ -~]*')`;

/** The key the entity of a stored key has now; the key itself when it has no other. */
function currentKey(key: string): string {
  const tag = key.slice(0, 2);
  const value = key.slice(2);
  if (tag === "i:") {
    const network = publicClientNetwork(value);
    return network === "" ? key : `i:${network}`;
  }
  return tag === "e:" ? `e:${canonicalEmail(value)}` : key;
}

/**
 * Gives the fraud graph's edges and labels, and e-mail list entries, the keys
 * their entities have now, once per database. Without it, a fraud label on an
 * IPv6 address or an internationalised e-mail given before would no longer be
 * found (labels never age out), and a list entry so spelt could no longer be
 * removed by the value the list shows. Where the new key is there already,
 * the old row goes (the two were one entity all along). The velocity
 * counters are left to age out of their windows, within a day.
 */
export function rekeyStoredEntities(deps: { db: Db; clock: Clock; logger: Logger }): void {
  const { db } = deps;
  const repairs = new RepairLog(db);
  if (repairs.done(REPAIR)) return;
  const changed = { graphEdges: 0, graphLabels: 0, listEntries: 0 };
  db.transaction(() => {
    changed.graphEdges = rekeyGraphTable(db, "graph_edges", ["account_id", "environment", "entity", "created_at", "decision_id"]);
    changed.graphLabels = rekeyGraphTable(db, "graph_labels", ["account_id", "environment", "entity", "decision_id"]);

    const entries = db
      .prepare<[], { account_id: string; environment: string; list_name: string; value: string; expires_at: number | null; created_at: number }>(
        `SELECT e.* FROM list_entries e JOIN lists l ON l.account_id = e.account_id AND l.environment = e.environment AND l.name = e.list_name
          WHERE l.kind = 'email' AND ${STALE_EMAIL_ENTRY}`,
      )
      .all();
    const insertEntry = db.prepare("INSERT OR IGNORE INTO list_entries VALUES (@account_id, @environment, @list_name, @value, @expires_at, @created_at)");
    const deleteEntry = db.prepare("DELETE FROM list_entries WHERE account_id = @account_id AND environment = @environment AND list_name = @list_name AND value = @value");
    for (const entry of entries) {
      const value = normalizeListEntry("email", entry.value);
      if (value === null || value === entry.value) continue;
      insertEntry.run({ ...entry, value });
      deleteEntry.run(entry);
      changed.listEntries++;
    }
    repairs.markDone(REPAIR, deps.clock.now());
  })();
  if (changed.graphEdges + changed.graphLabels + changed.listEntries > 0) {
    deps.logger.log("info", "gave stored entities the keys they have now (IPv6 addresses as their /64, e-mail domains in one spelling)", changed);
  }
}

/** Moves a graph table's rows from their stale keys to their entities' keys now; the rows moved. */
function rekeyGraphTable(db: Db, table: "graph_edges" | "graph_labels", columns: readonly string[]): number {
  const rows = db.prepare<[], { entity: string } & Record<string, string | number>>(`SELECT * FROM ${table} WHERE ${STALE_ENTITY}`).all();
  const insert = db.prepare(`INSERT OR IGNORE INTO ${table} VALUES (${columns.map((column) => `@${column}`).join(", ")})`);
  const remove = db.prepare(`DELETE FROM ${table} WHERE ${columns.map((column) => `${column} = @${column}`).join(" AND ")}`);
  let moved = 0;
  for (const row of rows) {
    const entity = currentKey(row.entity);
    if (entity === row.entity) continue;
    insert.run({ ...row, entity });
    remove.run(row);
    moved++;
  }
  return moved;
}
