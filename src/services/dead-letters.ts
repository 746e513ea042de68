import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { DeadLetterService } from "../../gen/fraud/v1/dead_letter_pb.js";
import { apiError } from "../api/errors.js";
import type { DeadLetter, Outbox } from "../outbox/outbox.js";
import { callerScope } from "./scope.js";

/** Dead letters a page holds when `limit` is left out: the API's and fraudctl's. */
export const DEFAULT_DEAD_LETTER_PAGE = 50;
/** Dead letters are outbox rows; their public id is the row id behind this prefix. */
const ID_PREFIX = "dlq_";

function deadLetterId(taskId: number): string {
  return `${ID_PREFIX}${taskId}`;
}

/** The outbox row id of a public dead-letter id; undefined when it cannot be one. */
export function taskIdOf(id: string): number | undefined {
  const digits = id.slice(ID_PREFIX.length);
  return id.startsWith(ID_PREFIX) && /^[1-9][0-9]{0,15}$/.test(digits) ? Number(digits) : undefined;
}

/** A dead letter as the API shows it (fraudctl prints the same). */
export function toDeadLetter(letter: DeadLetter) {
  return {
    id: deadLetterId(letter.id),
    kind: letter.kind,
    attempts: letter.attempts,
    lastError: letter.lastError,
    createdAt: timestampFromMs(letter.createdAt),
    failedAt: timestampFromMs(letter.updatedAt),
    // Every task kind carries an object payload.
    payload: letter.payload as JsonObject,
  };
}

/** The dead-letter queue: background tasks of every kind that failed for good, listed and replayed. */
export function createDeadLetterService(deps: { outbox: Outbox }): ServiceImpl<typeof DeadLetterService> {
  return {
    listDeadLetters(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const letters = deps.outbox.deadLetters(tenant, request.limit ?? DEFAULT_DEAD_LETTER_PAGE, request.offset ?? 0);
      return { deadLetters: letters.map(toDeadLetter), count: letters.length };
    },
    replayDeadLetter(request, ctx) {
      const { tenant } = callerScope(ctx.values);
      const taskId = taskIdOf(request.id);
      if (taskId === undefined || !deps.outbox.replay(tenant, taskId)) throw apiError("NOT_FOUND", `no dead letter ${request.id}`);
      return { id: request.id };
    },
  };
}
