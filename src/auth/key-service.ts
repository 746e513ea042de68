import type { AuditActor, AuditFields } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import { newId } from "../ids.js";
import type { ApiKeyRecord, ApiKeyRepository, ApiKeyWithAccount } from "../store/api-keys.js";
import type { AccountRepository, Account } from "../store/accounts.js";
import {
  ALL_PERMISSIONS,
  PUBLISHABLE_PERMISSIONS,
  shownPermissions,
  ROTATION_GRACE_MS,
  generateKey,
  hashKey,
  hashesMatch,
  parseKeyShape,
  type Environment,
  type KeyKind,
  type Permission,
} from "./keys.js";

/** Who is calling: resolved from a valid API key, scoped to one account and environment. */
export interface Principal {
  accountId: string;
  environment: Environment;
  keyId: string;
  kind: KeyKind;
  permissions: ReadonlySet<Permission>;
  /** Last 4 characters of the key, for logs. */
  keyLast4: string;
  rateLimitOverrides: Readonly<Record<string, number>>;
}

/** A key as just issued: the only moment its plaintext exists. */
export interface IssuedKey {
  record: ApiKeyRecord;
  key: string;
}

export interface AccountKeys {
  account: Account;
  keys: Record<Environment, { publishable: string; secret: string }>;
}

export class KeyError extends Error {}

/**
 * Issues, rotates, revokes and checks API keys. Keys are only ever stored
 * hashed. Every change is written together with its audit entry, naming
 * `actor` (fraudctl's user, or the service itself) as its author.
 */
export class KeyService {
  /**
   * The principal of each key record the repository holds in its cache, built once rather than per call
   * (a set of permissions and the parsed rate-limit overrides). A change to any key gives the repository new
   * records, and so new principals; expiry and revocation are still checked on every call.
   */
  private readonly principals = new WeakMap<ApiKeyWithAccount, Principal>();

  constructor(
    private readonly accounts: AccountRepository,
    private readonly keys: ApiKeyRepository,
    private readonly clock: Clock,
    private readonly audit: AuditTrail,
    private readonly actor: AuditActor,
  ) {}

  /** A new account with a publishable and a secret key in each environment. */
  createAccount(name: string, rateLimitOverrides: Record<string, number> = {}): AccountKeys {
    return this.audit.atomically(() => {
      const account = this.accounts.create(name, rateLimitOverrides, this.clock.now());
      this.audit.record({ accountId: account.id, actor: this.actor, action: "account.created", subject: account.id, data: { name, rateLimitOverrides } });
      const issue = (environment: Environment, kind: KeyKind) => this.issue({ accountId: account.id, environment, kind }).key;
      return {
        account,
        keys: {
          test: { publishable: issue("test", "publishable"), secret: issue("test", "secret") },
          live: { publishable: issue("live", "publishable"), secret: issue("live", "secret") },
        },
      };
    });
  }

  issue(options: {
    accountId: string;
    environment: Environment;
    kind: KeyKind;
    permissions?: Permission[];
    name?: string;
  }): IssuedKey {
    if (!this.accounts.get(options.accountId)) throw new KeyError(`no account ${options.accountId}`);
    if (options.kind === "publishable" && options.permissions?.some((p) => !PUBLISHABLE_PERMISSIONS.includes(p))) {
      throw new KeyError(`publishable keys can only hold ${PUBLISHABLE_PERMISSIONS.join(", ")}`);
    }
    const issued = this.mint({
      accountId: options.accountId,
      environment: options.environment,
      kind: options.kind,
      permissions: options.permissions,
      name: options.name ?? "",
    });
    const { record } = issued;
    this.audit.atomically(() => {
      this.keys.insert(record);
      this.audit.record(this.entry(record, "key.created", { kind: record.kind, permissions: shownPermissions(record.kind, record.permissions), name: record.name, last4: record.last4 }));
    });
    return issued;
  }

  /** Finds a key by its id (key_...) or by the key itself. */
  find(idOrKey: string): ApiKeyRecord | undefined {
    if (parseKeyShape(idOrKey)) return this.keys.findByHash(hashKey(idOrKey).toString("hex"));
    return this.keys.get(idOrKey);
  }

  /**
   * Issues a replacement with the same account, environment, kind and
   * permissions; the old key keeps working for 24 hours (part 3.3).
   */
  rotate(idOrKey: string): IssuedKey {
    const old = this.find(idOrKey);
    if (!old) throw new KeyError("no such key");
    if (old.revokedAt !== undefined) throw new KeyError(`key ${old.id} is revoked`);
    if (old.replacedBy !== undefined) {
      throw new KeyError(`key ${old.id} was already rotated; rotate its replacement ${old.replacedBy}`);
    }
    const replacement = this.mint(old);
    const graceUntil = this.clock.now() + ROTATION_GRACE_MS;
    this.audit.atomically(() => {
      // Checked again inside the write transaction: a rotation or revocation since the read above wins.
      if (!this.keys.rotate(old.id, replacement.record, graceUntil)) {
        throw new KeyError(`key ${old.id} was rotated or revoked meanwhile; list its keys and rotate the active one`);
      }
      this.audit.record(
        this.entry(old, "key.rotated", { replacedBy: replacement.record.id, last4: replacement.record.last4, oldKeyValidUntil: new Date(graceUntil).toISOString() }),
      );
    });
    return replacement;
  }

  /** Revocation takes effect at once, grace period or not. */
  revoke(idOrKey: string): ApiKeyRecord {
    const key = this.find(idOrKey);
    if (!key) throw new KeyError("no such key");
    return this.audit.atomically(() => {
      if (!this.keys.revoke(key.id, this.clock.now())) throw new KeyError(`key ${key.id} is already revoked`);
      this.audit.record(this.entry(key, "key.revoked", { last4: key.last4 }));
      return this.keys.get(key.id) as ApiKeyRecord;
    });
  }

  /** Every key, or one account's (which must exist: an empty list would hide a mistyped id). */
  list(accountId?: string): ApiKeyRecord[] {
    if (accountId !== undefined && !this.accounts.get(accountId)) throw new KeyError(`no account ${accountId}`);
    return this.keys.list(accountId);
  }

  /**
   * Resolves a presented key to its principal, or undefined when it is not a
   * current key. The lookup goes by hash and the stored hash is compared in
   * constant time, so response timing says nothing about how close a guess was.
   */
  authenticate(presented: string): Principal | undefined {
    const shape = parseKeyShape(presented);
    if (!shape) return undefined;
    const digest = hashKey(presented);
    const record = this.keys.findByHash(digest.toString("hex"));
    if (!record || !hashesMatch(record.keyHash, digest)) return undefined;
    if (record.kind !== shape.kind || record.environment !== shape.environment) return undefined;
    const now = this.clock.now();
    if (record.revokedAt !== undefined && record.revokedAt <= now) return undefined;
    if (record.expiresAt !== undefined && record.expiresAt <= now) return undefined;
    let principal = this.principals.get(record);
    if (!principal) {
      const permissions =
        record.permissions ?? (record.kind === "publishable" ? PUBLISHABLE_PERMISSIONS : ALL_PERMISSIONS);
      principal = {
        accountId: record.accountId,
        environment: record.environment,
        keyId: record.id,
        kind: record.kind,
        permissions: new Set(permissions),
        keyLast4: record.last4,
        rateLimitOverrides: JSON.parse(record.accountRateLimitOverrides) as Record<string, number>,
      };
      this.principals.set(record, principal);
    }
    return principal;
  }

  /** The audit entry of a change to a key: never the key, only its id and last 4 characters. */
  private entry(record: ApiKeyRecord, action: "key.created" | "key.rotated" | "key.revoked", data: AuditFields["data"]): AuditFields {
    return { accountId: record.accountId, environment: record.environment, actor: this.actor, action, subject: record.id, data };
  }

  /** A fresh key and its record, with the identity and permissions of `base`. */
  private mint(base: Pick<ApiKeyRecord, "accountId" | "environment" | "kind" | "permissions" | "name">): IssuedKey {
    const key = generateKey(base.kind, base.environment);
    return {
      key,
      record: {
        accountId: base.accountId,
        environment: base.environment,
        kind: base.kind,
        permissions: base.permissions,
        name: base.name,
        id: newId("key"),
        keyHash: hashKey(key).toString("hex"),
        last4: key.slice(-4),
        createdAt: this.clock.now(),
        expiresAt: undefined,
        revokedAt: undefined,
        replacedBy: undefined,
      },
    };
  }
}
