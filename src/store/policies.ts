import { canonicalJson, sha256Hex } from "../canonical-json.js";
import type { RuleDefinition } from "../policies/index.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/** A custom policy as stored (the built-in one is not stored: it is code). */
export interface StoredPolicy {
  id: string;
  name: string;
  description: string;
  status: "active" | "shadow" | "disabled";
  rules: RuleDefinition[];
  actions: string[];
  priority: number;
  version: number;
  createdAt: number;
  updatedAt: number;
}

/**
 * SHA-256 (hex) of what a policy version decides with, in canonical JSON: its signed audit entry records it,
 * so that `fraudctl audit verify` finds a policy changed in the database behind the service's back.
 */
export function policyContentHash(policy: StoredPolicy): string {
  const { id, name, description, status, rules, actions, priority, version } = policy;
  return sha256Hex(canonicalJson({ id, name, description, status, rules, actions, priority, version }));
}

interface PolicyRow {
  id: string;
  account_id: string;
  environment: "test" | "live";
  name: string;
  description: string;
  status: StoredPolicy["status"];
  rules: string;
  actions: string;
  priority: number;
  version: number;
  created_at: number;
  updated_at: number;
}

function toPolicy(row: PolicyRow): StoredPolicy {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    status: row.status,
    rules: JSON.parse(row.rules) as RuleDefinition[],
    actions: JSON.parse(row.actions) as string[],
    priority: row.priority,
    version: row.version,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** Policies per tenant; every saved version is also kept in policy_versions. */
export class PolicyRepository {
  private readonly listStmt;
  private readonly getStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly versionStmt;
  private readonly snapshotStmt;
  private readonly countStmt;
  private readonly allStmt;

  constructor(db: Db) {
    this.allStmt = db.prepare<[], PolicyRow>("SELECT * FROM policies ORDER BY account_id, environment, id");
    this.listStmt = db.prepare<[string, string], PolicyRow>(
      "SELECT * FROM policies WHERE account_id = ? AND environment = ? ORDER BY priority DESC, created_at, id",
    );
    this.getStmt = db.prepare<[string, string, string], PolicyRow>("SELECT * FROM policies WHERE id = ? AND account_id = ? AND environment = ?");
    this.insertStmt = db.prepare(
      `INSERT INTO policies VALUES (@id, @accountId, @environment, @name, @description, @status, @rules, @actions, @priority, @version, @createdAt, @updatedAt)`,
    );
    this.updateStmt = db.prepare(
      `UPDATE policies SET name = @name, description = @description, status = @status, rules = @rules, actions = @actions,
         priority = @priority, version = @version, updated_at = @updatedAt
       WHERE id = @id AND account_id = @accountId AND environment = @environment`,
    );
    this.deleteStmt = db.prepare<[string, string, string]>("DELETE FROM policies WHERE id = ? AND account_id = ? AND environment = ?");
    this.versionStmt = db.prepare(
      "INSERT INTO policy_versions VALUES (@id, @version, @accountId, @environment, @snapshot, @updatedAt)",
    );
    this.countStmt = db.prepare<[string, string], { n: number }>("SELECT COUNT(*) AS n FROM policies WHERE account_id = ? AND environment = ?");
    this.snapshotStmt = db.prepare<[string, number, string, string], { snapshot: string }>(
      "SELECT snapshot FROM policy_versions WHERE policy_id = ? AND version = ? AND account_id = ? AND environment = ?",
    );
  }

  /** How many policies the tenant holds. */
  count(tenant: Tenant): number {
    return this.countStmt.get(tenant.accountId, tenant.environment)?.n ?? 0;
  }

  /** The policy as saved at `version` (the snapshot its save recorded); kept after later saves and deletion. */
  atVersion(tenant: Tenant, id: string, version: number): StoredPolicy | undefined {
    const row = this.snapshotStmt.get(id, version, tenant.accountId, tenant.environment);
    return row && (JSON.parse(row.snapshot) as StoredPolicy);
  }

  /** Every tenant's policies (audit verification). */
  all(): Array<{ tenant: Tenant; policy: StoredPolicy }> {
    return this.allStmt.all().map((row) => ({ tenant: { accountId: row.account_id, environment: row.environment }, policy: toPolicy(row) }));
  }

  list(tenant: Tenant): StoredPolicy[] {
    return this.listStmt.all(tenant.accountId, tenant.environment).map(toPolicy);
  }

  get(tenant: Tenant, id: string): StoredPolicy | undefined {
    const row = this.getStmt.get(id, tenant.accountId, tenant.environment);
    return row && toPolicy(row);
  }

  /** Inserts or updates the policy and records the version (call inside a transaction). */
  save(tenant: Tenant, policy: StoredPolicy, isNew: boolean): void {
    const row = {
      ...policy,
      ...tenant,
      rules: JSON.stringify(policy.rules),
      actions: JSON.stringify(policy.actions),
    };
    (isNew ? this.insertStmt : this.updateStmt).run(row);
    this.versionStmt.run({ ...row, snapshot: JSON.stringify(policy) });
  }

  delete(tenant: Tenant, id: string): boolean {
    return this.deleteStmt.run(id, tenant.accountId, tenant.environment).changes === 1;
  }
}
