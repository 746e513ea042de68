// Stored policies checked against their signed audit entries. The chain proves the entries unaltered; each
// policy.created or policy.updated entry records the content hash of the version it saved, so a policy
// changed in the database afterwards (a condition loosened, a rule removed) no longer matches the newest entry
// about it, one restored after its deletion matches none, and one removed without a deletion entry is missed.
import type { KeyObject } from "node:crypto";
import { policyContentHash, type StoredPolicy } from "../store/policies.js";
import type { Tenant } from "../store/tenant.js";
import type { AuditRecord } from "./entry.js";
import { authenticBody } from "./verify.js";

export interface PolicyProblem {
  policyId: string;
  accountId: string;
  environment: string;
  version: number;
  message: string;
}

/**
 * The stored policies that disagree with the newest authentic entry about them. Entries written before
 * entries held a content hash anchor nothing: such a policy is passed over until its next change.
 */
export function verifyPolicies(
  policies: ReadonlyArray<{ tenant: Tenant; policy: StoredPolicy }>,
  entries: Iterable<AuditRecord>,
  publicKey: KeyObject,
): PolicyProblem[] {
  const newest = new Map<string, { action: string; data: unknown; seq: number; tenant: string }>();
  for (const entry of entries) {
    const body = authenticBody(entry, publicKey);
    if (body?.subject) newest.set(body.subject, { action: body.action, data: body.data, seq: body.seq, tenant: `${body.accountId}/${body.environment}` });
  }
  const problems: PolicyProblem[] = [];
  for (const { tenant, policy } of policies) {
    const problem = (message: string) =>
      problems.push({ policyId: policy.id, accountId: tenant.accountId, environment: tenant.environment, version: policy.version, message });
    const entry = newest.get(policy.id);
    if (entry === undefined) {
      problem("no signed audit entry records it");
      continue;
    }
    if (entry.tenant !== `${tenant.accountId}/${tenant.environment}`) {
      problem(`its audit entry (seq ${entry.seq}) is another account's or environment's`);
      continue;
    }
    if (entry.action === "policy.deleted") {
      problem(`it was deleted (audit seq ${entry.seq}) and is back without an entry`);
      continue;
    }
    const data = entry.data as { version?: unknown; contentHash?: unknown } | null;
    if (typeof data?.contentHash !== "string") continue;
    if (data.version !== policy.version) problem(`the newest audit entry (seq ${entry.seq}) saved version ${String(data.version)}, the database holds ${policy.version}`);
    else if (data.contentHash !== policyContentHash(policy)) problem(`its content differs from what its audit entry (seq ${entry.seq}) recorded`);
  }
  // A policy the log says exists, gone from the database without its deletion recorded: the biggest loosening.
  const stored = new Set(policies.map(({ policy }) => policy.id));
  for (const [policyId, entry] of newest) {
    if (stored.has(policyId) || entry.action === "policy.deleted") continue;
    const data = entry.data as { version?: unknown; contentHash?: unknown } | null;
    if (typeof data?.contentHash !== "string") continue;
    const [accountId = "", environment = ""] = entry.tenant.split("/");
    problems.push({ policyId, accountId, environment, version: Number(data.version), message: `its audit entry (seq ${entry.seq}) saved it, and no deletion is recorded, but the database no longer holds it` });
  }
  return problems;
}
