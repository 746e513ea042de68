import { CountedCache } from "./change-counter.js";
import type { Db } from "./database.js";
import type { Environment, KeyKind, Permission } from "../auth/keys.js";

/** An API key as stored: everything but the key itself. */
export interface ApiKeyRecord {
  id: string;
  accountId: string;
  environment: Environment;
  kind: KeyKind;
  /** Explicit permissions of a restricted key; undefined means all of its kind. */
  permissions: Permission[] | undefined;
  keyHash: string;
  last4: string;
  name: string;
  createdAt: number;
  /** End of the grace period of a rotated key. */
  expiresAt: number | undefined;
  revokedAt: number | undefined;
  replacedBy: string | undefined;
}

/** A key joined with what authentication needs from its account. */
export interface ApiKeyWithAccount extends ApiKeyRecord {
  accountRateLimitOverrides: string;
}

interface ApiKeyRow {
  id: string;
  account_id: string;
  environment: Environment;
  kind: KeyKind;
  permissions: string | null;
  key_hash: string;
  last4: string;
  name: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  replaced_by: string | null;
}

function toRecord(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    environment: row.environment,
    kind: row.kind,
    permissions: row.permissions === null ? undefined : (JSON.parse(row.permissions) as Permission[]),
    keyHash: row.key_hash,
    last4: row.last4,
    name: row.name,
    createdAt: row.created_at,
    expiresAt: row.expires_at ?? undefined,
    revokedAt: row.revoked_at ?? undefined,
    replacedBy: row.replaced_by ?? undefined,
  };
}

/** Keys remembered by the lookup cache before it starts over. */
const MAX_CACHED_KEYS = 10_000;

/** Rolls a rotation back (its replacement's insert with it) when the old key changed since it was read. */
class RotatedMeanwhile extends Error {}

export class ApiKeyRepository {
  private readonly insertStmt;
  private readonly byHashStmt;
  private readonly byIdStmt;
  private readonly listStmt;
  private readonly listByAccountStmt;
  private readonly expireStmt;
  private readonly revokeStmt;
  /**
   * Keys by hash, as looked up. Every request authenticates, so the lookup is
   * served from memory while the key rows are unchanged: triggers count every
   * change to the keys and their accounts (migration 7), by this process or
   * another (the fraudctl CLI), and a lookup first reads that counter, once per
   * event-loop turn (store/change-counter.ts). New, rotated and revoked keys
   * therefore take effect from the next turn: at once when changed here.
   * Unknown hashes are remembered too (null), up to the cap: a flood of wrong
   * keys costs no query each.
   */
  private readonly byHash;

  constructor(private readonly db: Db) {
    this.insertStmt = db.prepare(
      `INSERT INTO api_keys (id, account_id, environment, kind, permissions, key_hash, last4, name, created_at)
       VALUES (@id, @accountId, @environment, @kind, @permissions, @keyHash, @last4, @name, @createdAt)`,
    );
    this.byHashStmt = db.prepare<[string], ApiKeyRow & { rate_limit_overrides: string }>(
      `SELECT k.*, a.rate_limit_overrides FROM api_keys k JOIN accounts a ON a.id = k.account_id
       WHERE k.key_hash = ?`,
    );
    this.byIdStmt = db.prepare<[string], ApiKeyRow>("SELECT * FROM api_keys WHERE id = ?");
    this.listStmt = db.prepare<[], ApiKeyRow>("SELECT * FROM api_keys ORDER BY account_id, created_at, id");
    this.listByAccountStmt = db.prepare<[string], ApiKeyRow>(
      "SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, id",
    );
    // Only a key neither rotated nor revoked: of two rotations at once, the second changes nothing.
    this.expireStmt = db.prepare<[number, string, string]>(
      "UPDATE api_keys SET expires_at = ?, replaced_by = ? WHERE id = ? AND replaced_by IS NULL AND revoked_at IS NULL",
    );
    this.revokeStmt = db.prepare<[number, string]>(
      "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
    );
    this.byHash = new CountedCache<string, ApiKeyWithAccount | null>(db, "api_keys", MAX_CACHED_KEYS);
  }

  insert(record: ApiKeyRecord): void {
    this.insertStmt.run({
      ...record,
      permissions: record.permissions === undefined ? null : JSON.stringify(record.permissions),
    });
    this.byHash.forget();
  }

  findByHash(hashHex: string): ApiKeyWithAccount | undefined {
    const found = this.byHash.get(hashHex, () => {
      const row = this.byHashStmt.get(hashHex);
      return row ? { ...toRecord(row), accountRateLimitOverrides: row.rate_limit_overrides } : null;
    });
    return found ?? undefined;
  }

  get(id: string): ApiKeyRecord | undefined {
    const row = this.byIdStmt.get(id);
    return row && toRecord(row);
  }

  list(accountId?: string): ApiKeyRecord[] {
    const rows = accountId === undefined ? this.listStmt.all() : this.listByAccountStmt.all(accountId);
    return rows.map(toRecord);
  }

  /**
   * Inserts `replacement` and starts the old key's grace period, atomically;
   * false, with nothing changed, when the old key was rotated or revoked in the
   * meantime (by another process: the check before this one read it earlier).
   */
  rotate(oldId: string, replacement: ApiKeyRecord, graceEndsAt: number): boolean {
    try {
      this.db.transaction(() => {
        // The replacement first: the old key's row names it.
        this.insert(replacement);
        const expired = this.expireStmt.run(graceEndsAt, replacement.id, oldId).changes === 1;
        this.byHash.forget();
        if (!expired) throw new RotatedMeanwhile();
      })();
      return true;
    } catch (error) {
      if (error instanceof RotatedMeanwhile) return false;
      throw error;
    }
  }

  revoke(id: string, now: number): boolean {
    const revoked = this.revokeStmt.run(now, id).changes === 1;
    this.byHash.forget();
    return revoked;
  }
}
