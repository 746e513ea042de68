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
  // 2: decisions, evidence, the comprehensive path's history, idempotency and analyze state.
  `
  -- Per-account secret for keyed hashes (visitor ids), so ids never correlate across accounts.
  ALTER TABLE accounts ADD COLUMN hash_key BLOB;
  UPDATE accounts SET hash_key = randomblob(32);

  CREATE TABLE decisions (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    evidence_id TEXT NOT NULL UNIQUE,
    request_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    action TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    decision TEXT NOT NULL,
    score INTEGER NOT NULL,
    confidence REAL NOT NULL,
    -- The rest of the record (request, signals, contributions, policy results, timings) as JSON.
    record TEXT NOT NULL
  ) STRICT;
  CREATE INDEX decisions_by_user ON decisions(account_id, environment, user_id, created_at);
  CREATE INDEX decisions_by_time ON decisions(account_id, environment, created_at);

  -- What a decision was made from, with a hash over its canonical JSON so feedback can prove it unaltered.
  CREATE TABLE evidence (
    id TEXT PRIMARY KEY,
    decision_id TEXT NOT NULL REFERENCES decisions(id),
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    content TEXT NOT NULL,
    integrity_hash TEXT NOT NULL
  ) STRICT;

  -- Sliding-window counters per entity (user, ip, device, email): current and previous bucket
  -- of each window, so a decision reads and bumps O(1) rows, never scans.
  CREATE TABLE velocity_counters (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    entity TEXT NOT NULL,
    minute_start INTEGER NOT NULL, minute_current INTEGER NOT NULL, minute_previous INTEGER NOT NULL,
    hour_start INTEGER NOT NULL, hour_current INTEGER NOT NULL, hour_previous INTEGER NOT NULL,
    day_start INTEGER NOT NULL, day_current INTEGER NOT NULL, day_previous INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, entity)
  ) STRICT, WITHOUT ROWID;

  -- Distinct users per device or IP and UTC day: the row set dedupes, the counter is read.
  CREATE TABLE entity_users (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    entity TEXT NOT NULL,
    day INTEGER NOT NULL,
    user_id TEXT NOT NULL,
    PRIMARY KEY (account_id, environment, entity, day, user_id)
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE entity_user_counts (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    entity TEXT NOT NULL,
    day INTEGER NOT NULL,
    users INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, entity, day)
  ) STRICT, WITHOUT ROWID;

  -- One row per end user: what the history signals compare against.
  CREATE TABLE user_profiles (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    user_id TEXT NOT NULL,
    last_decision_at INTEGER NOT NULL,
    last_country TEXT NOT NULL,
    last_ip TEXT NOT NULL,
    known_devices TEXT NOT NULL,
    known_countries TEXT NOT NULL,
    amounts TEXT NOT NULL,
    PRIMARY KEY (account_id, environment, user_id)
  ) STRICT, WITHOUT ROWID;

  -- Category weights per account and environment; absent means the defaults (version 1).
  CREATE TABLE category_weights (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    version INTEGER NOT NULL,
    weights TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment)
  ) STRICT;

  CREATE TABLE idempotency_keys (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    response BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, key)
  ) STRICT;

  -- Analyze keeps short-lived state only: a key-value table with expiry.
  CREATE TABLE analyze_state (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, key)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX analyze_state_expiry ON analyze_state(expires_at);
  `,
  // 3: the outbox of side effects that follow a response, and fraud cases.
  `
  -- Work to carry out after a response, written in the same transaction as what caused it.
  -- Rows are deleted when done; 'dead' rows are the dead-letter queue.
  CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    account_id TEXT,
    environment TEXT,
    payload TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX outbox_due ON outbox(status, next_attempt_at, id);

  CREATE TABLE cases (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    status TEXT NOT NULL,
    priority TEXT NOT NULL,
    score INTEGER NOT NULL,
    decision TEXT NOT NULL,
    reasons TEXT NOT NULL,
    assignee TEXT NOT NULL DEFAULT '',
    notes TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    -- One case per decision: replaying the outbox task cannot open a second one.
    UNIQUE (account_id, environment, decision_id)
  ) STRICT;
  CREATE INDEX cases_by_time ON cases(account_id, environment, created_at);
  `,
  // 4: webhook endpoints and the signed audit log.
  `
  CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL CHECK (environment IN ('test', 'live')),
    delivery_method TEXT NOT NULL CHECK (delivery_method IN ('http', 'websocket')),
    -- Empty for websocket endpoints.
    url TEXT NOT NULL,
    -- JSON array of event types; [] means every type.
    events TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('enabled', 'disabled')),
    description TEXT NOT NULL,
    -- The signing secret itself: HMAC needs it, so it cannot be hashed (docs/webhooks.md).
    secret TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX webhook_endpoints_by_account ON webhook_endpoints(account_id, environment, created_at);

  -- docs/audit-log.md: one installation-wide chain, appended in IMMEDIATE transactions.
  CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    at INTEGER NOT NULL,
    account_id TEXT,
    environment TEXT CHECK (environment IN ('test', 'live')),
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    subject TEXT,
    body TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    signature TEXT NOT NULL
  ) STRICT;
  CREATE INDEX audit_log_by_account ON audit_log(account_id, environment, seq);
  -- One decision.made entry per decision: a follow-up carried out again (decisions/follow-up.ts) finds it and skips it.
  CREATE UNIQUE INDEX audit_log_one_per_decision ON audit_log(subject) WHERE action = 'decision.made';
  -- Append-only for ordinary code paths. Anyone holding the file can drop these triggers; the chain is what
  -- catches them.
  CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
  CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
  `,
  // 5: policies, their versions, and named lists.
  `
  CREATE TABLE policies (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    status TEXT NOT NULL,
    rules TEXT NOT NULL,
    actions TEXT NOT NULL,
    priority INTEGER NOT NULL,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX policies_by_tenant ON policies(account_id, environment);

  -- Every version a policy ever had: decisions record the versions that produced them.
  CREATE TABLE policy_versions (
    policy_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (policy_id, version)
  ) STRICT;

  CREATE TABLE lists (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    type TEXT NOT NULL,
    description TEXT NOT NULL,
    automatic INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, name)
  ) STRICT;

  CREATE TABLE list_entries (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    list_name TEXT NOT NULL,
    value TEXT NOT NULL,
    -- NULL: never expires.
    expires_at INTEGER,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, list_name, value)
  ) STRICT, WITHOUT ROWID;
  `,
  // 6: feedback, the fraud graph and the consortium (docs/feedback.md).
  `
  -- One row per submission; the latest row of a decision is its current label.
  CREATE TABLE feedback (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    actual_outcome TEXT NOT NULL,
    confidence REAL NOT NULL,
    notes TEXT NOT NULL,
    weights_version_before INTEGER NOT NULL,
    weights_version_after INTEGER NOT NULL,
    -- JSON object: category -> weight change.
    adjustments TEXT NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX feedback_by_decision ON feedback(account_id, environment, decision_id, created_at);

  -- Decision-entity edges, written in the decide transaction. Entities carry a type tag (u:, d:, i:, e:, c:, a:).
  CREATE TABLE graph_edges (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    entity TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    decision_id TEXT NOT NULL,
    PRIMARY KEY (account_id, environment, entity, created_at, decision_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX graph_edges_by_decision ON graph_edges(decision_id);

  -- Fraud labels on entities, one row per labelled decision that holds the entity.
  CREATE TABLE graph_labels (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    entity TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    PRIMARY KEY (account_id, environment, entity, decision_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX graph_labels_by_decision ON graph_labels(decision_id);

  -- Consortium membership per account and environment. The key and token are kept as such: HMAC needs them.
  CREATE TABLE consortium_settings (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL CHECK (environment IN ('test', 'live')),
    consortium_key TEXT NOT NULL,
    -- Empty: this account reads and receives indicators but shares none.
    share_url TEXT NOT NULL,
    share_token TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment)
  ) STRICT;

  -- Indicators received from consortium members: keyed hashes only, never who sent them.
  CREATE TABLE consortium_indicators (
    environment TEXT NOT NULL,
    hash TEXT NOT NULL,
    type TEXT NOT NULL,
    reports INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (environment, hash)
  ) STRICT, WITHOUT ROWID;

  -- Batches already stored, so a retried batch counts once.
  CREATE TABLE consortium_batches (
    id TEXT PRIMARY KEY,
    received_at INTEGER NOT NULL
  ) STRICT;
  `,
  // 7: a change counter for the API key cache. Decisions are committed by another connection (the decision
  // writer's thread), so "has another connection committed?" (PRAGMA data_version) is true nearly always;
  // "have keys or their accounts changed?" is what the cache needs, whoever changed them.
  `
  CREATE TABLE change_counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
  ) STRICT;
  INSERT INTO change_counters VALUES ('api_keys', 0);
  CREATE TRIGGER api_keys_inserted AFTER INSERT ON api_keys
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'api_keys'; END;
  CREATE TRIGGER api_keys_updated AFTER UPDATE ON api_keys
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'api_keys'; END;
  CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'api_keys'; END;
  CREATE TRIGGER accounts_updated_for_keys AFTER UPDATE ON accounts
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'api_keys'; END;
  CREATE TRIGGER accounts_deleted_for_keys AFTER DELETE ON accounts
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'api_keys'; END;
  `,
  // 8: a user's last IP address, which nothing reads since impossible travel compares countries: an address
  // kept for no use is one too many.
  `
  ALTER TABLE user_profiles DROP COLUMN last_ip;
  `,
  // 9: batch ids are the sending member's: one account's (or environment's) batch must never be taken for
  // another's retry. The ids stored so far name no sender; they only caught retries, which come within
  // minutes, so they are let go rather than guessed at.
  `
  DROP TABLE consortium_batches;
  CREATE TABLE consortium_batches (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    id TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, environment, id)
  ) STRICT, WITHOUT ROWID;
  `,
  // 10: of a day's distinct users of a device or IP, how many were also seen the day before, so that the
  // sliding day counts a user seen on both days once (store/history.ts). Rows written before count 0.
  `
  ALTER TABLE entity_user_counts ADD COLUMN carried INTEGER NOT NULL DEFAULT 0;
  `,
  // 11: the outbox runner looks for due tasks past the accounts that already have their share running
  // (outbox/outbox.ts): the tenant columns in the index let it skip them without reading their rows.
  `
  DROP INDEX outbox_due;
  CREATE INDEX outbox_due ON outbox(status, next_attempt_at, id, account_id, environment);
  `,
  // 12: an account's allowed payments per currency, so that a user's first payment can be compared with what
  // is typical for the account (a first high-value purchase; engine/signals/store.ts).
  `
  CREATE TABLE account_amounts (
    account_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    currency TEXT NOT NULL,
    payments INTEGER NOT NULL,
    log_sum REAL NOT NULL,
    PRIMARY KEY (account_id, environment, currency)
  ) STRICT, WITHOUT ROWID;
  `,
  // 13: one-time repairs of data that an earlier release got wrong, each done once (feedback/repair.ts).
  `
  CREATE TABLE repairs_done (
    name TEXT PRIMARY KEY,
    done_at INTEGER NOT NULL
  ) STRICT;
  `,
  // 14: the destination a task waits on (a webhook endpoint's id, the consortium hub; '' for work done here),
  // so that one destination that does not answer holds a few of its account's running places, not all of
  // them (outbox/outbox.ts). Tasks written before have none: migration 15 gives them theirs.
  `
  ALTER TABLE outbox ADD COLUMN lane TEXT NOT NULL DEFAULT '';
  DROP INDEX outbox_due;
  CREATE INDEX outbox_due ON outbox(status, next_attempt_at, id, account_id, environment, lane);
  `,
  // 15: the tasks written before migration 14, pending or dead, get their lanes from their payloads (the
  // endpoint of a delivery, the hub of a share); left in the local lane, a stuck endpoint's old deliveries
  // would hold the places of its account's event fan-out.
  `
  UPDATE outbox SET lane = ifnull(json_extract(payload, '$.endpointId'), '') WHERE lane = '' AND kind = 'webhook.delivery' AND json_valid(payload);
  UPDATE outbox SET lane = 'consortium' WHERE lane = '' AND kind = 'consortium.share';
  `,
  // 16: the background prunes find the rows past their time through an index, a step of rows at a time
  // (store/prune-steps.ts), instead of reading the whole table under the write lock.
  `
  CREATE INDEX idempotency_keys_by_time ON idempotency_keys(created_at);
  CREATE INDEX list_entries_expiry ON list_entries(expires_at) WHERE expires_at IS NOT NULL;
  CREATE INDEX outbox_dead_by_time ON outbox(updated_at) WHERE status = 'dead';
  `,
  // 17: a change counter for the category weights, which every decide and analyze reads: they are served
  // from memory while it stands still (store/weights.ts), whoever changed them (feedback here, or another
  // process on the same database).
  `
  INSERT INTO change_counters VALUES ('category_weights', 0);
  CREATE TRIGGER category_weights_inserted AFTER INSERT ON category_weights
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'category_weights'; END;
  CREATE TRIGGER category_weights_updated AFTER UPDATE ON category_weights
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'category_weights'; END;
  CREATE TRIGGER category_weights_deleted AFTER DELETE ON category_weights
    BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'category_weights'; END;
  `,
];
