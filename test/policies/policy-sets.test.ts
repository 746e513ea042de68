import { describe, expect, it } from "vitest";
import { PolicySets } from "../../src/decisions/policy-set.js";
import { compilePolicy } from "../../src/policies/index.js";
import { openDatabase } from "../../src/store/database.js";
import { ListRepository } from "../../src/store/lists.js";
import { PolicyRepository, type StoredPolicy } from "../../src/store/policies.js";
import type { Tenant } from "../../src/store/tenant.js";
import { tempDir } from "../helpers/server.js";

const tenant: Tenant = { accountId: "acc_sets", environment: "live" };

function storedPolicy(version: number): StoredPolicy {
  return {
    id: "pol_sets_one",
    name: "Tor",
    description: "",
    status: "active",
    rules: [{ condition: "score >= 90", action: "deny" }],
    actions: [],
    priority: 50,
    version,
    createdAt: 1_000,
    updatedAt: 1_000 + version,
  };
}

describe("an account's compiled policy set", () => {
  it("keeps the policies it compiled when it is rebuilt, whatever other accounts pushed out of the shared cache", () => {
    const db = openDatabase(tempDir("policy-sets-"));
    db.prepare("INSERT INTO accounts (id, name, created_at) VALUES (?, 'Sets', 0)").run(tenant.accountId);
    const policies = new PolicyRepository(db);
    const sets = new PolicySets(policies, new ListRepository(db));
    policies.save(tenant, storedPolicy(1), true);
    const compiledOf = () => sets.forTenant(tenant, 2_000).byId.get("pol_sets_one")?.compiled;
    const first = compiledOf();
    expect(first?.version).toBe(1);

    // Another account saves a thousand and one versions: the shared cache holds a thousand.
    for (let version = 1; version <= 1_001; version++) {
      compilePolicy({ id: "pol_sets_other", version, status: "shadow", priority: 1, actions: [], rules: [{ condition: "score > 1", action: "deny" }], builtIn: false });
    }
    // A list of this account's changes: its set is rebuilt, its policy not compiled again.
    sets.invalidate(tenant);
    expect(compiledOf()).toBe(first);

    // A new version of the policy is compiled.
    policies.save(tenant, storedPolicy(2), false);
    sets.invalidate(tenant);
    const second = compiledOf();
    expect(second).not.toBe(first);
    expect(second?.version).toBe(2);
    db.close();
  });
});
