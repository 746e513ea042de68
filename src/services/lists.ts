import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { ListService, NamedListSchema } from "../../gen/fraud/v1/list_pb.js";
import { apiError } from "../api/errors.js";
import type { Clock } from "../clock.js";
import type { PolicySets } from "../decisions/policy-set.js";
import { canonicalJson, sha256Hex } from "../canonical-json.js";
import { canonicalCidr } from "../engine/ip.js";
import { isEmailAddress } from "../engine/signals/email.js";
import { MAX_LIST_ENTRIES, MAX_LISTS, isUsableNewListName, isValidListName, normalizeListEntry, type ListKind } from "../policies/index.js";
import type { Db } from "../store/database.js";
import type { ListRepository, StoredList } from "../store/lists.js";
import type { Tenant } from "../store/tenant.js";
import type { AuditActor } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import { callerScope } from "./scope.js";

const DEFAULT_PAGE = 100;

function toNamedList(list: StoredList): MessageInitShape<typeof NamedListSchema> {
  return {
    name: list.name,
    kind: list.kind,
    type: list.type,
    description: list.description,
    automatic: list.automatic,
    entryCount: list.entryCount,
    createdAt: timestampFromMs(list.createdAt),
    updatedAt: timestampFromMs(list.updatedAt),
  };
}

/** Why an e-mail list cannot take `value`, for its field violation. */
function emailEntryProblem(value: string): string {
  if (value.trim().startsWith("@")) {
    return "is a domain, not an e-mail address: an e-mail list matches whole addresses; match a domain with a rule on signals.email.domain";
  }
  return "is not an e-mail address (local-part@domain, as decide judges signals.email.valid)";
}

function checkName(name: string): void {
  if (!isValidListName(name)) {
    const rule = "must be letters, digits and _, not starting with a digit, at most 64 characters";
    throw apiError("VALIDATION_ERROR", `list name "${name}" ${rule}`, { fieldViolations: [{ field: "name", description: rule }] });
  }
}

/** A new list's name must also be one a rule can write after `lists.` (lists saved before stay usable through the API). */
function checkNewName(name: string): void {
  if (!isUsableNewListName(name)) {
    const rule = "is a word rules reserve (null, true, in, AND, OR, NOT, ...): no rule could name the list";
    throw apiError("VALIDATION_ERROR", `list name "${name}" ${rule}`, { fieldViolations: [{ field: "name", description: rule }] });
  }
}

/** Named allow and deny lists that policy rules test with `value in lists.<name>`. */
export function createListService(deps: {
  db: Db;
  clock: Clock;
  lists: ListRepository;
  sets: PolicySets;
  audit: AuditTrail;
}): ServiceImpl<typeof ListService> {
  const existing = (tenant: Tenant, name: string): StoredList => {
    checkName(name);
    const list = deps.lists.get(tenant, name, deps.clock.now());
    if (!list) throw apiError("NOT_FOUND", `no list ${name}`);
    return list;
  };
  /** Each change and its signed audit entry commit together (called inside the change's transaction). */
  const changed = (tenant: Tenant, action: "list.updated" | "list.deleted" | "list.entries_added" | "list.entries_removed", name: string, data: Record<string, number | string | boolean>, actor: AuditActor) => {
    deps.audit.record({ ...tenant, actor, action, subject: name, data });
  };

  const put = deps.db.transaction((tenant: Tenant, list: Pick<StoredList, "name" | "kind" | "type" | "description" | "automatic">, actor: AuditActor) => {
    const now = deps.clock.now();
    if (!deps.lists.get(tenant, list.name, now) && deps.lists.count(tenant) >= MAX_LISTS) {
      throw apiError("CONFLICT", `this account and environment already hold ${MAX_LISTS} lists, the most allowed; delete one first`);
    }
    deps.lists.put(tenant, list, now);
    changed(tenant, "list.updated", list.name, { kind: list.kind, type: list.type, automatic: list.automatic }, actor);
  });
  const add = deps.db.transaction((tenant: Tenant, name: string, entries: Array<{ value: string; expiresAt: number | undefined }>, actor: AuditActor) => {
    const now = deps.clock.now();
    let added = 0;
    for (const entry of entries) if (deps.lists.putEntry(tenant, name, entry, now)) added++;
    // Past the limit the whole call rolls back: nothing of it is kept.
    const held = deps.lists.get(tenant, name, now)?.entryCount ?? 0;
    if (held > MAX_LIST_ENTRIES) {
      throw apiError("CONFLICT", `list ${name} would hold ${held} entries, more than the ${MAX_LIST_ENTRIES} allowed; nothing was added`);
    }
    deps.lists.touch(tenant, name, now);
    const sorted = entries.map((entry): [string, number | null] => [entry.value, entry.expiresAt ?? null]).sort(byValue);
    changed(tenant, "list.entries_added", name, { added, updated: entries.length - added, entriesHash: entriesHash(sorted) }, actor);
    return added;
  });
  const removeEntries = deps.db.transaction((tenant: Tenant, list: StoredList, values: string[], actor: AuditActor) => {
    const { name } = list;
    let removed = 0;
    // Ranges saved before they were stored in canonical form keep the spelling they came in (10.1.2.3/16):
    // any spelling of the range removes them too. Their canonical forms are worked out once for the call.
    const oldSpellings = new Map<string, string[]>();
    if (list.kind === "ip" && values.some((value) => value.includes("/"))) {
      for (const stored of deps.lists.ranges(tenant, name)) {
        const canonical = canonicalCidr(stored);
        if (canonical !== null && canonical !== stored) oldSpellings.set(canonical, [...(oldSpellings.get(canonical) ?? []), stored]);
      }
    }
    for (const value of values) {
      if (deps.lists.removeEntry(tenant, name, value)) removed++;
      for (const stored of oldSpellings.get(value) ?? []) if (deps.lists.removeEntry(tenant, name, stored)) removed++;
    }
    deps.lists.touch(tenant, name, deps.clock.now());
    changed(tenant, "list.entries_removed", name, { removed, entriesHash: entriesHash(values.map((value): [string] => [value]).sort(byValue)) }, actor);
    return removed;
  });
  const removeList = deps.db.transaction((tenant: Tenant, name: string, actor: AuditActor) => {
    deps.lists.delete(tenant, name);
    changed(tenant, "list.deleted", name, {}, actor);
  });

  /**
   * Normalises entries for the list's kind, naming every one that is not valid. An e-mail added must be an
   * address (one that is not could never be matched by what it was meant for: `@domain` matches no address
   * of the domain); one removed need only name an entry, which an earlier release may have taken as it was.
   */
  const normalize = (kind: ListKind, values: string[], field: (i: number) => string, use: "add" | "remove"): string[] => {
    const violations: Array<{ field: string; description: string }> = [];
    const normalized = values.map((value, i) => {
      const entry = normalizeListEntry(kind, value);
      if (entry === null) violations.push({ field: field(i), description: `is not a valid ${kind === "ip" ? "IP address or CIDR range" : kind}` });
      else if (kind === "email" && use === "add" && !isEmailAddress(value)) violations.push({ field: field(i), description: emailEntryProblem(value) });
      return entry ?? "";
    });
    if (violations.length > 0) throw apiError("VALIDATION_ERROR", `invalid entries: ${violations.map((v) => v.field).join(", ")}`, { fieldViolations: violations });
    return normalized;
  };

  return {
    listLists(_request, ctx) {
      const { tenant } = callerScope(ctx.values);
      return { lists: deps.lists.list(tenant, deps.clock.now()).map(toNamedList) };
    },
    getList(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const list = existing(tenant, request.name);
      const entries = deps.lists.page(tenant, list.name, deps.clock.now(), request.limit ?? DEFAULT_PAGE, request.offset ?? 0);
      return {
        list: toNamedList(list),
        entries: entries.map((entry) => ({ value: entry.value, expiresAt: entry.expiresAt === undefined ? undefined : timestampFromMs(entry.expiresAt) })),
      };
    },
    putList(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      checkName(request.name);
      const current = deps.lists.get(tenant, request.name, deps.clock.now());
      if (!current) checkNewName(request.name);
      if (current && current.kind !== request.kind) {
        throw apiError("CONFLICT", `list ${request.name} holds ${current.kind} entries; its kind cannot change to ${request.kind}`);
      }
      if (request.automatic && request.type !== "deny") {
        throw apiError("VALIDATION_ERROR", "only deny lists can be automatic", { fieldViolations: [{ field: "automatic", description: "only deny lists can be automatic" }] });
      }
      put.immediate(tenant, { name: request.name, kind: request.kind as ListKind, type: request.type as "allow" | "deny", description: request.description, automatic: request.automatic }, actor);
      deps.sets.invalidate(tenant);
      return { list: toNamedList(existing(tenant, request.name)), created: current === undefined };
    },
    addListEntries(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      const list = existing(tenant, request.name);
      const now = deps.clock.now();
      const values = normalize(list.kind, request.entries.map((entry) => entry.value), (i) => `entries[${i}].value`, "add");
      const entries = request.entries.map((entry, i) => {
        const expiresAt = entry.expiresAt ? timestampMs(entry.expiresAt) : undefined;
        if (expiresAt !== undefined && expiresAt <= now) {
          throw apiError("VALIDATION_ERROR", `entries[${i}].expiresAt is in the past`, { fieldViolations: [{ field: `entries[${i}].expiresAt`, description: "is in the past" }] });
        }
        return { value: values[i] as string, expiresAt };
      });
      const added = add.immediate(tenant, list.name, entries, actor);
      deps.sets.invalidate(tenant);
      return { added, updated: entries.length - added };
    },
    removeListEntries(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      const list = existing(tenant, request.name);
      const values = normalize(list.kind, request.values, (i) => `values[${i}]`, "remove");
      const removed = removeEntries.immediate(tenant, list, values, actor);
      deps.sets.invalidate(tenant);
      return { removed };
    },
    deleteList(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      const list = existing(tenant, request.name);
      removeList.immediate(tenant, list.name, actor);
      deps.sets.invalidate(tenant);
      return {};
    },
  };
}

/** Entries in the order their hash is taken in: by value, in UTF-16 code units as canonical JSON sorts keys. */
function byValue(a: readonly [string, ...unknown[]], b: readonly [string, ...unknown[]]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}

/**
 * What a call added or removed, as its audit entry records it: the SHA-256 of the canonical JSON of its
 * normalised entries sorted by value (docs/audit-log.md). A call carries up to 10,000 entries, too many to
 * sign into every entry and page through; the hash proves a copy of them is what the call changed.
 */
function entriesHash(sorted: ReadonlyArray<readonly [string, ...unknown[]]>): string {
  return sha256Hex(canonicalJson(sorted));
}
