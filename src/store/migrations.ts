/**
 * Numbered schema migrations. Each runs once, in order, inside the transaction
 * that bumps PRAGMA user_version, so a crash never leaves a half-applied step
 * and two processes starting together apply each step once.
 *
 * Never edit a migration that has shipped: add the next one.
 */
export const migrations: readonly string[] = [
  // 1: tenants and API keys.
  `
  CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    -- JSON object: rate-limit rule name -> calls per window (e.g. {"decide": 500}).
    rate_limit_overrides TEXT NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    environment TEXT NOT NULL CHECK (environment IN ('test', 'live')),
    kind TEXT NOT NULL CHECK (kind IN ('publishable', 'secret')),
    -- JSON array of permissions; NULL means every permission of the key kind.
    permissions TEXT,
    -- SHA-256 of the whole key, hex. The key itself is never stored.
    key_hash TEXT NOT NULL UNIQUE,
    last4 TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    -- Set when the key is rotated: the end of its grace period.
    expires_at INTEGER,
    revoked_at INTEGER,
    replaced_by TEXT REFERENCES api_keys(id)
  ) STRICT;
  CREATE INDEX api_keys_by_account ON api_keys(account_id, environment);
  `,
];
