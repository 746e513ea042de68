import { DEFAULT_WEIGHTS, validateWeights, type CategoryWeights } from "../engine/index.js";
import { CountedCache } from "./change-counter.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/**
 * The account's current category weights; the defaults (version 1) until
 * feedback first moves them. Writes are optimistic: `replace` succeeds only if
 * the version is still the one the new weights were computed from.
 */
export class WeightsRepository {
  private readonly getStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  /**
   * Weights by tenant ("account/environment"), as read while the change
   * counter (migration 17) stands where it stood then: every decide and
   * analyze asks for them.
   */
  private readonly byTenant;

  constructor(db: Db) {
    this.getStmt = db.prepare<[string, string], { version: number; weights: string }>(
      "SELECT version, weights FROM category_weights WHERE account_id = ? AND environment = ?",
    );
    // No row means the defaults: the first update inserts, and a concurrent first update finds the row and loses.
    this.insertStmt = db.prepare<[string, string, number, string, number]>(
      "INSERT INTO category_weights VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    );
    this.updateStmt = db.prepare<[number, string, number, string, string, number]>(
      "UPDATE category_weights SET version = ?, weights = ?, updated_at = ? WHERE account_id = ? AND environment = ? AND version = ?",
    );
    this.byTenant = new CountedCache<string, CategoryWeights>(db, "category_weights");
  }

  /**
   * The weights as of this event-loop turn (store/change-counter.ts): a change
   * made elsewhere is seen from the next turn, one made by {@link replace} at
   * once. A stale reading costs an update nothing but a retry: `replace`
   * compares versions in the store.
   */
  current(tenant: Tenant): CategoryWeights {
    return this.byTenant.get(`${tenant.accountId}/${tenant.environment}`, () => this.read(tenant));
  }

  private read(tenant: Tenant): CategoryWeights {
    const row = this.getStmt.get(tenant.accountId, tenant.environment);
    if (!row) return DEFAULT_WEIGHTS;
    const checked = validateWeights({ version: row.version, weights: JSON.parse(row.weights) as unknown });
    if (!checked.ok) throw new Error(`stored weights of ${tenant.accountId}/${tenant.environment} are invalid: ${checked.errors.join("; ")}`);
    // Shared by every caller until the weights change: frozen, as the defaults are.
    return Object.freeze({ version: checked.value.version, weights: Object.freeze(checked.value.weights) });
  }

  /**
   * Stores `next` as version `expectedVersion + 1` if the stored version is
   * still `expectedVersion`; false when another writer got there first.
   * Invalid weights are never stored.
   */
  replace(tenant: Tenant, expectedVersion: number, next: CategoryWeights["weights"], now: number): boolean {
    const checked = validateWeights({ version: expectedVersion + 1, weights: next });
    if (!checked.ok) throw new Error(`refusing to store invalid weights: ${checked.errors.join("; ")}`);
    const json = JSON.stringify(next);
    const { accountId, environment } = tenant;
    // Whether it wins or finds that another writer did first, what this turn read of the weights is stale.
    this.byTenant.forget();
    if (expectedVersion === DEFAULT_WEIGHTS.version && !this.getStmt.get(accountId, environment)) {
      return this.insertStmt.run(accountId, environment, expectedVersion + 1, json, now).changes === 1;
    }
    return this.updateStmt.run(expectedVersion + 1, json, now, accountId, environment, expectedVersion).changes === 1;
  }
}
