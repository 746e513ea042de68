import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import { publicIpText } from "../engine/index.js";
import type { Logger } from "../log.js";
import type { Db } from "../store/database.js";
import type { SqliteAuditStore } from "../store/audit.js";
import type { ListRepository } from "../store/lists.js";
import { RepairLog } from "../store/repairs.js";
import type { Tenant } from "../store/tenant.js";

/** Its name in `repairs_done` (migration 13): it runs once per database. */
const REPAIR = "non-public-automatic-ip-entries";

/** The list changes of the audit log that say who last touched a list's entries. */
const LIST_CHANGES = ["feedback.received", "list.entries_added", "list.entries_removed", "list.deleted"] as const;

/**
 * Takes back, once, what feedback put in automatic IP deny lists before only
 * public addresses could join them (2026-11-21): a backend's own loopback or
 * private address, which denied every customer behind it from then on.
 *
 * An entry goes only when the last change the audit log records to its list
 * is a `feedback.received` that added it: after an analyst added or removed
 * entries of that list by hand, which entries are theirs cannot be told (the
 * log records how many, not which), and theirs must stay. Each list's removal
 * is audited (actor `system`). Returns the entries removed.
 */
export function removeNonPublicAutomaticEntries(deps: {
  db: Db;
  lists: ListRepository;
  auditEntries: Pick<SqliteAuditStore, "actionsOf">;
  audit: AuditTrail;
  clock: Clock;
  logger: Logger;
}): number {
  const repairs = new RepairLog(deps.db);
  if (repairs.done(REPAIR)) return 0;
  const candidates = deps.lists.automaticDenyEntries("ip").filter((entry) => !entry.value.includes("/") && publicIpText(entry.value) === "");

  /** Per tenant, per list: the values whose list's last recorded change is feedback adding them. */
  const fedByFeedback = new Map<string, Map<string, Set<string>>>();
  const feedbackEntries = (tenant: Tenant): Map<string, Set<string>> => {
    const key = `${tenant.accountId}\u0000${tenant.environment}`;
    let lists = fedByFeedback.get(key);
    if (lists) return lists;
    lists = new Map();
    for (const row of deps.auditEntries.actionsOf(tenant, LIST_CHANGES)) {
      if (row.action !== "feedback.received") {
        // Touched by hand (or deleted): nothing of the list is known to be feedback's any more.
        lists.delete(row.subject ?? "");
        continue;
      }
      for (const { list, value } of listEntriesAdded(row.body)) {
        let values = lists.get(list);
        if (!values) lists.set(list, (values = new Set()));
        values.add(value);
      }
    }
    fedByFeedback.set(key, lists);
    return lists;
  };

  const byList = new Map<string, { tenant: Tenant; list: string; values: string[] }>();
  for (const { tenant, list, value } of candidates) {
    if (!feedbackEntries(tenant).get(list)?.has(value)) continue;
    const listKey = `${tenant.accountId}\u0000${tenant.environment}\u0000${list}`;
    const group = byList.get(listKey) ?? { tenant, list, values: [] };
    group.values.push(value);
    byList.set(listKey, group);
  }

  let removed = 0;
  deps.db
    .transaction(() => {
      // Another process starting on the same database may have done it meanwhile.
      if (repairs.done(REPAIR)) return;
      for (const group of byList.values()) {
        let count = 0;
        for (const value of group.values) if (deps.lists.removeEntry(group.tenant, group.list, value)) count++;
        if (count === 0) continue;
        deps.lists.touch(group.tenant, group.list, deps.clock.now());
        deps.audit.record({
          ...group.tenant,
          actor: "system",
          action: "list.entries_removed",
          subject: group.list,
          data: { removed: count, reason: "addresses that are not public, added by feedback before they were kept out of automatic lists", values: group.values.join(", ") },
        });
        removed += count;
        deps.logger.log("warn", "removed non-public addresses that feedback had added to an automatic deny list", { ...group.tenant, list: group.list, removed: count });
      }
      repairs.markDone(REPAIR, deps.clock.now());
    })
    .immediate();
  return removed;
}

/** What a feedback.received entry says it added to lists; nothing for a body of any other shape (a start must not fail on one). */
function listEntriesAdded(body: string): Array<{ list: string; value: string }> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return [];
  }
  const data = typeof parsed === "object" && parsed !== null ? (parsed as { data?: unknown }).data : undefined;
  const listed = typeof data === "object" && data !== null ? (data as { listEntriesAdded?: unknown }).listEntriesAdded : undefined;
  if (!Array.isArray(listed)) return [];
  return listed.filter(
    (item): item is { list: string; value: string } =>
      typeof item === "object" && item !== null && typeof (item as { list?: unknown }).list === "string" && typeof (item as { value?: unknown }).value === "string",
  );
}
