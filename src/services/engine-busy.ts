import { apiError } from "../api/errors.js";
import { EngineBusyError } from "../decisions/engine.js";

/**
 * The engine's bounded queues protect the service under a flood: a refusal
 * there is an overload the client can retry (503 with Retry-After), not a fault.
 */
export function unavailableWhenBusy(error: unknown): never {
  if (error instanceof EngineBusyError) {
    throw apiError("SERVICE_UNAVAILABLE", `${error.message}: retry in a second`, { retryAfterSeconds: 1, cause: error });
  }
  throw error;
}
