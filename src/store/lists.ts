import type { ListKind } from "../policies/index.js";
import type { Db } from "./database.js";
import { PRUNE_STEP_ROWS, pruneInSteps } from "./prune-steps.js";
import type { Tenant } from "./tenant.js";

export interface StoredList {
  name: string;
  kind: ListKind;
  type: "allow" | "deny";
  description: string;
  automatic: boolean;
  entryCount: number;
  createdAt: number;
  updatedAt: number;
}

interface ListRow {
  name: string;
  kind: ListKind;
  type: "allow" | "deny";
  description: string;
  automatic: number;
  created_at: number;
  updated_at: number;
  entry_count: number;
}

function toList(row: ListRow): StoredList {
  return {
    name: row.name,
    kind: row.kind,
    type: row.type,
    description: row.description,
    automatic: row.automatic === 1,
    entryCount: row.entry_count,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export interface StoredEntry {
  value: string;
  expiresAt: number | undefined;
}

/** One step of the prune, through list_entries_expiry; WITHOUT ROWID, so its rows are named by their primary key. */
export const PRUNE_LIST_ENTRIES_SQL = `DELETE FROM list_entries WHERE (account_id, environment, list_name, value) IN
  (SELECT account_id, environment, list_name, value FROM list_entries WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ${PRUNE_STEP_ROWS})`;

/** Named lists and their entries; expired entries are invisible and pruned in the background. */
export class ListRepository {
  private readonly listStmt;
  private readonly getStmt;
  private readonly upsertStmt;
  private readonly touchStmt;
  private readonly deleteStmt;
  private readonly deleteEntriesStmt;
  private readonly entriesStmt;
  private readonly pageStmt;
  private readonly findEntryStmt;
  private readonly putEntryStmt;
  private readonly removeEntryStmt;
  private readonly rangesStmt;
  private readonly countStmt;
  private readonly pruneStmt;
  private readonly automaticDenyEntriesStmt;

  constructor(db: Db) {
    const columns = `l.name, l.kind, l.type, l.description, l.automatic, l.created_at, l.updated_at,
      (SELECT COUNT(*) FROM list_entries e WHERE e.account_id = l.account_id AND e.environment = l.environment
         AND e.list_name = l.name AND (e.expires_at IS NULL OR e.expires_at > @now)) AS entry_count`;
    this.listStmt = db.prepare<[{ accountId: string; environment: string; now: number }], ListRow>(
      `SELECT ${columns} FROM lists l WHERE l.account_id = @accountId AND l.environment = @environment ORDER BY l.name`,
    );
    this.getStmt = db.prepare<[{ accountId: string; environment: string; name: string; now: number }], ListRow>(
      `SELECT ${columns} FROM lists l WHERE l.account_id = @accountId AND l.environment = @environment AND l.name = @name`,
    );
    this.upsertStmt = db.prepare(
      `INSERT INTO lists VALUES (@accountId, @environment, @name, @kind, @type, @description, @automatic, @now, @now)
       ON CONFLICT DO UPDATE SET type = @type, description = @description, automatic = @automatic, updated_at = @now`,
    );
    this.touchStmt = db.prepare<[number, string, string, string]>(
      "UPDATE lists SET updated_at = ? WHERE account_id = ? AND environment = ? AND name = ?",
    );
    this.deleteStmt = db.prepare<[string, string, string]>("DELETE FROM lists WHERE account_id = ? AND environment = ? AND name = ?");
    this.deleteEntriesStmt = db.prepare<[string, string, string]>(
      "DELETE FROM list_entries WHERE account_id = ? AND environment = ? AND list_name = ?",
    );
    this.entriesStmt = db.prepare<[string, string, number], { list_name: string; value: string; expires_at: number | null }>(
      `SELECT list_name, value, expires_at FROM list_entries
       WHERE account_id = ? AND environment = ? AND (expires_at IS NULL OR expires_at > ?)`,
    );
    this.pageStmt = db.prepare<[string, string, string, number, number, number], { value: string; expires_at: number | null }>(
      `SELECT value, expires_at FROM list_entries
       WHERE account_id = ? AND environment = ? AND list_name = ? AND (expires_at IS NULL OR expires_at > ?)
       ORDER BY value LIMIT ? OFFSET ?`,
    );
    this.findEntryStmt = db.prepare<[string, string, string, string], { expires_at: number | null }>(
      "SELECT expires_at FROM list_entries WHERE account_id = ? AND environment = ? AND list_name = ? AND value = ?",
    );
    this.putEntryStmt = db.prepare<[string, string, string, string, number | null, number]>(
      "INSERT INTO list_entries VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET expires_at = excluded.expires_at",
    );
    this.removeEntryStmt = db.prepare<[string, string, string, string]>(
      "DELETE FROM list_entries WHERE account_id = ? AND environment = ? AND list_name = ? AND value = ?",
    );
    this.pruneStmt = db.prepare<[number]>(PRUNE_LIST_ENTRIES_SQL);
    this.countStmt = db.prepare<[string, string], { n: number }>("SELECT COUNT(*) AS n FROM lists WHERE account_id = ? AND environment = ?");
    this.rangesStmt = db.prepare<[string, string, string], { value: string }>(
      "SELECT value FROM list_entries WHERE account_id = ? AND environment = ? AND list_name = ? AND value LIKE '%/%'",
    );
    this.automaticDenyEntriesStmt = db.prepare<[string], { accountId: string; environment: Tenant["environment"]; list: string; value: string }>(
      `SELECT e.account_id AS accountId, e.environment AS environment, e.list_name AS list, e.value AS value
         FROM list_entries e
         JOIN lists l ON l.account_id = e.account_id AND l.environment = e.environment AND l.name = e.list_name
        WHERE l.automatic = 1 AND l.kind = ? AND l.type = 'deny'`,
    );
  }

  /** Every entry of every tenant's automatic deny lists of a kind (for a one-time repair, not for requests). */
  automaticDenyEntries(kind: ListKind): Array<{ tenant: Tenant; list: string; value: string }> {
    return this.automaticDenyEntriesStmt.all(kind).map(({ accountId, environment, list, value }) => ({ tenant: { accountId, environment }, list, value }));
  }

  list(tenant: Tenant, now: number): StoredList[] {
    return this.listStmt.all({ ...tenant, now }).map(toList);
  }

  get(tenant: Tenant, name: string, now: number): StoredList | undefined {
    const row = this.getStmt.get({ ...tenant, name, now });
    return row && toList(row);
  }

  put(tenant: Tenant, list: Pick<StoredList, "name" | "kind" | "type" | "description" | "automatic">, now: number): void {
    this.upsertStmt.run({ ...tenant, ...list, automatic: list.automatic ? 1 : 0, now });
  }

  delete(tenant: Tenant, name: string): boolean {
    this.deleteEntriesStmt.run(tenant.accountId, tenant.environment, name);
    return this.deleteStmt.run(tenant.accountId, tenant.environment, name).changes === 1;
  }

  /** Live entries of every list of the tenant, grouped by list. */
  liveEntries(tenant: Tenant, now: number): Map<string, StoredEntry[]> {
    const byList = new Map<string, StoredEntry[]>();
    for (const row of this.entriesStmt.iterate(tenant.accountId, tenant.environment, now)) {
      let entries = byList.get(row.list_name);
      if (!entries) byList.set(row.list_name, (entries = []));
      entries.push({ value: row.value, expiresAt: row.expires_at ?? undefined });
    }
    return byList;
  }

  page(tenant: Tenant, name: string, now: number, limit: number, offset: number): StoredEntry[] {
    return this.pageStmt
      .all(tenant.accountId, tenant.environment, name, now, limit, offset)
      .map((row) => ({ value: row.value, expiresAt: row.expires_at ?? undefined }));
  }

  /**
   * Adds or renews one entry; true when it was not live before (new, or expired and not yet pruned: it
   * counted for nothing until now). Call inside a transaction with `touch`.
   */
  putEntry(tenant: Tenant, name: string, entry: StoredEntry, now: number): boolean {
    const wasLive = this.isLive(tenant, name, entry.value, now);
    this.putEntryStmt.run(tenant.accountId, tenant.environment, name, entry.value, entry.expiresAt ?? null, now);
    return !wasLive;
  }

  /**
   * Adds one entry unless it is live already: a live one keeps the expiry a person gave it. True when added.
   * Call inside a transaction with `touch`.
   */
  addEntryUnlessLive(tenant: Tenant, name: string, entry: StoredEntry, now: number): boolean {
    if (this.isLive(tenant, name, entry.value, now)) return false;
    this.putEntryStmt.run(tenant.accountId, tenant.environment, name, entry.value, entry.expiresAt ?? null, now);
    return true;
  }

  private isLive(tenant: Tenant, name: string, value: string, now: number): boolean {
    const found = this.findEntryStmt.get(tenant.accountId, tenant.environment, name, value);
    return found !== undefined && (found.expires_at === null || found.expires_at > now);
  }

  removeEntry(tenant: Tenant, name: string, value: string): boolean {
    return this.removeEntryStmt.run(tenant.accountId, tenant.environment, name, value).changes === 1;
  }

  /** How many lists the tenant holds (without counting their entries, as list() does). */
  count(tenant: Tenant): number {
    return this.countStmt.get(tenant.accountId, tenant.environment)?.n ?? 0;
  }

  /** The list's CIDR ranges as stored (entries holding a "/"). */
  ranges(tenant: Tenant, name: string): string[] {
    return this.rangesStmt.all(tenant.accountId, tenant.environment, name).map((row) => row.value);
  }

  touch(tenant: Tenant, name: string, now: number): void {
    this.touchStmt.run(now, tenant.accountId, tenant.environment, name);
  }

  /** Deletes the expired entries (invisible already), a step at a time (prune-steps.ts); returns how many. */
  prune(now: number, stopped: () => boolean = () => false): Promise<number> {
    return pruneInSteps(() => this.pruneStmt.run(now).changes, stopped);
  }
}
