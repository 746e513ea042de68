import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { AuditService } from "../../gen/fraud/v1/audit_pb.js";
import type { AuditRecord } from "../audit/entry.js";
import type { SqliteAuditStore } from "../store/audit.js";
import { callerScope } from "./scope.js";

const DEFAULT_PAGE = 50;

function toEntry(record: AuditRecord) {
  return {
    seq: BigInt(record.seq),
    id: record.id,
    at: timestampFromMs(record.at),
    environment: record.environment ?? "",
    actor: record.actor,
    action: record.action,
    subject: record.subject ?? "",
    // Read from the signed body: what the hash and signature cover.
    data: fromJson(ValueSchema, (JSON.parse(record.body) as { data: JsonValue }).data),
    body: record.body,
    prevHash: record.prevHash,
    hash: record.hash,
    signature: record.signature,
  };
}

/** GET /api/v1/audit-logs: the account's entries, oldest first (docs/audit-log.md). */
export function createAuditService(deps: { store: SqliteAuditStore }): ServiceImpl<typeof AuditService> {
  return {
    listAuditLogs(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const entries = deps.store.page(tenant, {
        action: request.action || undefined,
        limit: request.limit ?? DEFAULT_PAGE,
        offset: request.offset ?? 0,
      });
      return { entries: entries.map(toEntry), count: entries.length };
    },
  };
}
