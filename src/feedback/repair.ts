import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import { publicIpText } from "../engine/index.js";
import type { Logger } from "../log.js";
import type { Db } from "../store/database.js";
import type { ListRepository } from "../store/lists.js";
import type { Tenant } from "../store/tenant.js";

/**
 * Takes back what feedback put in automatic IP deny lists before only public
 * addresses could join them (2026-11-21): a backend's own loopback or private
 * address, which denied every customer behind it from then on. Only entries a
 * `feedback.received` audit entry records adding are removed; an address an
 * analyst put there stays. Each list's removal is audited (actor `system`).
 * Runs at every start, at the cost of one query over automatic IP lists'
 * entries when there is nothing to take back. Returns the entries removed.
 */
export function removeNonPublicAutomaticEntries(deps: { db: Db; lists: ListRepository; audit: AuditTrail; clock: Clock; logger: Logger }): number {
  const { db } = deps;
  const candidates = (
    db
      .prepare(
        `SELECT e.account_id AS accountId, e.environment AS environment, e.list_name AS list, e.value AS value
           FROM list_entries e
           JOIN lists l ON l.account_id = e.account_id AND l.environment = e.environment AND l.name = e.list_name
          WHERE l.automatic = 1 AND l.kind = 'ip' AND l.type = 'deny'`,
      )
      .all() as Array<{ accountId: string; environment: Tenant["environment"]; list: string; value: string }>
  ).filter((entry) => !entry.value.includes("/") && publicIpText(entry.value) === "");
  if (candidates.length === 0) return 0;

  const addedByFeedback = db.prepare<[string, string], { body: string }>(
    "SELECT body FROM audit_log WHERE action = 'feedback.received' AND account_id = ? AND environment = ?",
  );
  const byList = new Map<string, { tenant: Tenant; list: string; values: string[] }>();
  const provenance = new Map<string, Set<string>>();
  for (const entry of candidates) {
    const tenantKey = `${entry.accountId}\u0000${entry.environment}`;
    let added = provenance.get(tenantKey);
    if (!added) {
      added = new Set();
      for (const { body } of addedByFeedback.all(entry.accountId, entry.environment)) {
        const listed = (JSON.parse(body) as { data?: { listEntriesAdded?: Array<{ list: string; value: string }> } }).data?.listEntriesAdded ?? [];
        for (const { list, value } of listed) added.add(`${list}\u0000${value}`);
      }
      provenance.set(tenantKey, added);
    }
    if (!added.has(`${entry.list}\u0000${entry.value}`)) continue;
    const listKey = `${tenantKey}\u0000${entry.list}`;
    const group = byList.get(listKey) ?? { tenant: { accountId: entry.accountId, environment: entry.environment }, list: entry.list, values: [] };
    group.values.push(entry.value);
    byList.set(listKey, group);
  }

  let removed = 0;
  const takeBack = db.transaction((group: { tenant: Tenant; list: string; values: string[] }) => {
    let count = 0;
    for (const value of group.values) if (deps.lists.removeEntry(group.tenant, group.list, value)) count++;
    if (count === 0) return 0;
    deps.lists.touch(group.tenant, group.list, deps.clock.now());
    deps.audit.record({
      ...group.tenant,
      actor: "system",
      action: "list.entries_removed",
      subject: group.list,
      data: { removed: count, reason: "addresses that are not public, added by feedback before they were kept out of automatic lists", values: group.values.join(", ") },
    });
    return count;
  });
  for (const group of byList.values()) {
    const count = takeBack(group);
    removed += count;
    if (count > 0) deps.logger.log("warn", "removed non-public addresses that feedback had added to an automatic deny list", { ...group.tenant, list: group.list, removed: count });
  }
  return removed;
}
