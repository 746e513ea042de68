import type { ContextValues } from "@connectrpc/connect";
import type { AuditActor } from "../audit/entry.js";
import { callContext } from "../api/context.js";
import { apiError } from "../api/errors.js";
import type { KeyKind } from "../auth/keys.js";
import type { Tenant } from "../store/tenant.js";

/** The calling key's tenant, the key as the actor of what the call changes, and the key's kind. */
export function callerScope(values: ContextValues): { tenant: Tenant; actor: AuditActor; keyKind: KeyKind } {
  const principal = callContext(values).principal;
  if (!principal) throw apiError("UNAUTHORIZED", "an API key is required");
  return {
    tenant: { accountId: principal.accountId, environment: principal.environment },
    // Key ids are minted as key_... (newId("key")).
    actor: principal.keyId as `key_${string}`,
    keyKind: principal.kind,
  };
}
