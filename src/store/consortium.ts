import { indicatorsOf, type Indicator, type IndicatorType } from "../consortium/indicators.js";
import type { DecisionEntities } from "./history.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/** An account's consortium membership in one environment (docs/feedback.md). */
export interface ConsortiumSettings {
  /** The consortium-wide secret: hashes indicators, signs and verifies batches. */
  key: string;
  /** Ingest endpoint of the consortium to share with; "" when this account does not share. */
  shareUrl: string;
  /** This member's API key at that endpoint (consortium:write). */
  shareToken: string;
  updatedAt: number;
}

/** What the consortium knows of a request's entities (HistorySnapshot.consortium). */
export interface ConsortiumMatch {
  matches: number;
  indicatorTypes: IndicatorType[];
}

interface SettingsRow {
  consortium_key: string;
  share_url: string;
  share_token: string;
  updated_at: number;
}

/**
 * Consortium settings per account and environment, and the indicators this
 * installation has received. Indicators are kept per environment (test and
 * live never mix) with no trace of who sent them.
 */
export class ConsortiumRepository {
  private readonly settingsStmt;
  private readonly putSettingsStmt;
  private readonly deleteSettingsStmt;
  private readonly claimBatchStmt;
  private readonly upsertIndicatorStmt;
  private readonly indicatorStmt;
  private readonly storeBatchTx;

  constructor(db: Db) {
    this.settingsStmt = db.prepare<[string, string], SettingsRow>(
      "SELECT consortium_key, share_url, share_token, updated_at FROM consortium_settings WHERE account_id = ? AND environment = ?",
    );
    this.putSettingsStmt = db.prepare(
      `INSERT INTO consortium_settings VALUES (@accountId, @environment, @key, @shareUrl, @shareToken, @now)
       ON CONFLICT DO UPDATE SET consortium_key = @key, share_url = @shareUrl, share_token = @shareToken, updated_at = @now`,
    );
    this.deleteSettingsStmt = db.prepare<[string, string]>("DELETE FROM consortium_settings WHERE account_id = ? AND environment = ?");
    this.claimBatchStmt = db.prepare<[string, string, string, number]>("INSERT OR IGNORE INTO consortium_batches VALUES (?, ?, ?, ?)");
    this.upsertIndicatorStmt = db.prepare<[string, string, string, number, number]>(
      `INSERT INTO consortium_indicators VALUES (?, ?, ?, 1, ?, ?)
       ON CONFLICT DO UPDATE SET reports = reports + 1, last_seen = excluded.last_seen`,
    );
    this.indicatorStmt = db.prepare<[string, string], { type: IndicatorType }>(
      "SELECT type FROM consortium_indicators WHERE environment = ? AND hash = ?",
    );
    this.storeBatchTx = db.transaction((sender: Tenant, batchId: string, indicators: readonly Indicator[], now: number): boolean => {
      if (this.claimBatchStmt.run(sender.accountId, sender.environment, batchId, now).changes === 0) return false;
      for (const indicator of indicators) this.upsertIndicatorStmt.run(sender.environment, indicator.hash, indicator.type, now, now);
      return true;
    });
  }

  settings(tenant: Tenant): ConsortiumSettings | undefined {
    const row = this.settingsStmt.get(tenant.accountId, tenant.environment);
    return row && { key: row.consortium_key, shareUrl: row.share_url, shareToken: row.share_token, updatedAt: row.updated_at };
  }

  putSettings(tenant: Tenant, settings: Omit<ConsortiumSettings, "updatedAt">, now: number): void {
    this.putSettingsStmt.run({ ...tenant, ...settings, now });
  }

  deleteSettings(tenant: Tenant): boolean {
    return this.deleteSettingsStmt.run(tenant.accountId, tenant.environment).changes === 1;
  }

  /**
   * Stores a batch received from `sender` (the member whose key sent it) once: false when that member sent
   * the batch id before (a retry). Its indicators join the sender's environment, for every member in it.
   */
  storeBatch(sender: Tenant, batchId: string, indicators: readonly Indicator[], now: number): boolean {
    return this.storeBatchTx.immediate(sender, batchId, indicators, now);
  }

  /**
   * The request's entities hashed with the account's consortium key and looked
   * up among received indicators: at most three primary-key reads. Undefined
   * when the account is not a consortium member (the signal is unavailable).
   */
  lookup(tenant: Tenant, entities: Pick<DecisionEntities, "email" | "deviceId" | "ip">): ConsortiumMatch | undefined {
    const settings = this.settings(tenant);
    if (!settings) return undefined;
    const indicatorTypes: IndicatorType[] = [];
    for (const indicator of indicatorsOf(entities, settings.key)) {
      const row = this.indicatorStmt.get(tenant.environment, indicator.hash);
      if (row && !indicatorTypes.includes(row.type)) indicatorTypes.push(row.type);
    }
    return { matches: indicatorTypes.length, indicatorTypes };
  }
}
