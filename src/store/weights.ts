import { DEFAULT_WEIGHTS, validateWeights, type CategoryWeights } from "../engine/index.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/** The account's current category weights; the defaults until feedback first moves them. */
export class WeightsRepository {
  private readonly getStmt;

  constructor(db: Db) {
    this.getStmt = db.prepare<[string, string], { version: number; weights: string }>(
      "SELECT version, weights FROM category_weights WHERE account_id = ? AND environment = ?",
    );
  }

  current(tenant: Tenant): CategoryWeights {
    const row = this.getStmt.get(tenant.accountId, tenant.environment);
    if (!row) return DEFAULT_WEIGHTS;
    const checked = validateWeights({ version: row.version, weights: JSON.parse(row.weights) as unknown });
    if (!checked.ok) throw new Error(`stored weights of ${tenant.accountId}/${tenant.environment} are invalid: ${checked.errors.join("; ")}`);
    return checked.value;
  }
}
