import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { CaseService as CaseRpc, FraudCaseSchema } from "../../gen/fraud/v1/case_pb.js";
import { apiError } from "../api/errors.js";
import { CaseConflictError, type CaseService } from "../cases/case-service.js";
import type { CasePriority, CaseStatus } from "../cases/lifecycle.js";
import type { CaseRepository, StoredCase } from "../store/cases.js";
import { callerScope } from "./scope.js";

const DEFAULT_PAGE = 50;

function toFraudCase(stored: StoredCase): MessageInitShape<typeof FraudCaseSchema> {
  return {
    id: stored.id,
    status: stored.status,
    priority: stored.priority,
    score: stored.score,
    decision: stored.decision,
    reasons: stored.reasons,
    createdAt: timestampFromMs(stored.createdAt),
    updatedAt: timestampFromMs(stored.updatedAt),
    decisionId: stored.decisionId,
    userId: stored.userId,
    assignee: stored.assignee,
    notes: stored.notes.map((note) => ({ text: note.text, createdAt: timestampFromMs(note.createdAt) })),
  };
}

/** Cases (part 4.4): list with filters and paging, get one, move one along its lifecycle. */
export function createCaseService(deps: { cases: CaseRepository; lifecycle: CaseService }): ServiceImpl<typeof CaseRpc> {
  return {
    listCases(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const cases = deps.cases.list(tenant, {
        status: (request.status || undefined) as CaseStatus | undefined,
        priority: (request.priority || undefined) as CasePriority | undefined,
        limit: request.limit ?? DEFAULT_PAGE,
        offset: request.offset ?? 0,
      });
      return { cases: cases.map(toFraudCase), count: cases.length };
    },
    getCase(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const stored = deps.cases.get(tenant, request.id);
      if (!stored) throw apiError("NOT_FOUND", `no case ${request.id}`);
      return { case: toFraudCase(stored) };
    },
    updateCase(request, ctx) {
      const { tenant, actor } = callerScope(ctx.values);
      let updated: StoredCase | undefined;
      try {
        updated = deps.lifecycle.update(tenant, request.id, {
          status: request.status as CaseStatus | undefined,
          assignee: request.assignee,
          note: request.note,
          actor,
        });
      } catch (error) {
        if (error instanceof CaseConflictError) throw apiError("CONFLICT", error.message);
        throw error;
      }
      if (!updated) throw apiError("NOT_FOUND", `no case ${request.id}`);
      return { case: toFraudCase(updated) };
    },
  };
}
