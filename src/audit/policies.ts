// Stored policies checked against their signed audit entries. The chain proves the entries unaltered; each
// policy.created or policy.updated entry records the content hash of the version it saved, so a policy
// changed in the database afterwards (a condition loosened, a rule removed) no longer matches the newest entry
// about it, one restored after its deletion matches none, and one removed without a deletion entry is missed.
import { policyContentHash, type StoredPolicy } from "../store/policies.js";
import type { Tenant } from "../store/tenant.js";
import type { AuditBody, AuditRecord } from "./entry.js";

export interface PolicyProblem {
  policyId: string;
  accountId: string;
  environment: string;
  version: number;
  message: string;
}

/** What a policy entry's `data` holds (services/policies.ts); entries of earlier releases lack the hash. */
interface PolicyEntryData {
  version?: unknown;
  contentHash?: unknown;
}

/**
 * The stored policies that disagree with the newest entry about them. `entries` must come from a chain the
 * caller verified, read in the same transaction (fraudctl audit verify): their signatures are not checked
 * again here. Entries written before entries held a content hash anchor nothing: such a policy is passed over
 * until its next change.
 */
export function verifyPolicies(policies: ReadonlyArray<{ tenant: Tenant; policy: StoredPolicy }>, entries: Iterable<AuditRecord>): PolicyProblem[] {
  const newest = new Map<string, AuditBody>();
  for (const entry of entries) if (entry.subject !== null) newest.set(entry.subject, JSON.parse(entry.body) as AuditBody);
  const problems: PolicyProblem[] = [];
  const report = (policyId: string, accountId: string, environment: string, version: number, message: string) =>
    problems.push({ policyId, accountId, environment, version, message });

  for (const { tenant, policy } of policies) {
    const problem = (message: string) => report(policy.id, tenant.accountId, tenant.environment, policy.version, message);
    const entry = newest.get(policy.id);
    if (entry === undefined) {
      problem("no signed audit entry records it");
      continue;
    }
    if (entry.accountId !== tenant.accountId || entry.environment !== tenant.environment) {
      problem(`its audit entry (seq ${entry.seq}) is another account's or environment's`);
      continue;
    }
    if (entry.action === "policy.deleted") {
      problem(`it was deleted (audit seq ${entry.seq}) and is back without an entry`);
      continue;
    }
    const data = entry.data as PolicyEntryData | null;
    if (typeof data?.contentHash !== "string") continue;
    if (data.version !== policy.version) problem(`the newest audit entry (seq ${entry.seq}) saved version ${String(data.version)}, the database holds ${policy.version}`);
    else if (data.contentHash !== policyContentHash(policy)) problem(`its content differs from what its audit entry (seq ${entry.seq}) recorded`);
  }

  // A policy the log says exists, gone from the database without its deletion recorded: the biggest loosening.
  const stored = new Set(policies.map(({ policy }) => policy.id));
  for (const [policyId, entry] of newest) {
    const data = entry.data as PolicyEntryData | null;
    if (stored.has(policyId) || entry.action === "policy.deleted" || typeof data?.contentHash !== "string") continue;
    report(policyId, entry.accountId ?? "", entry.environment ?? "", Number(data.version), `its audit entry (seq ${entry.seq}) saved it, and no deletion is recorded, but the database no longer holds it`);
  }
  return problems;
}
