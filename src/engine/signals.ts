// The two halves of the dual-path engine and how they combine. The fast path
// uses only in-memory reference data; the comprehensive path adds the
// store-backed categories once the store has answered.

import type { ReferenceData } from "./reference-data.js";
import { computeBehaviorSignals } from "./signals/behavior.js";
import { computeDeviceSignals } from "./signals/device.js";
import { computeEmailSignals } from "./signals/email.js";
import { computeNetworkSignals } from "./signals/network.js";
import { unavailableStoreSignals } from "./signals/store.js";
import { computeUserAgentSignals } from "./signals/user-agent.js";
import type { EngineInput, FastSignals, ListSignals, Signals, StoreSignals } from "./types.js";

export { computeStoreSignals, EMPTY_HISTORY_SNAPSHOT, paymentOf, userLocationCountry } from "./signals/store.js";

/** Network, geo, user agent, device, behaviour and e-mail signals; no I/O. */
export function computeFastSignals(
  input: EngineInput,
  referenceData: ReferenceData,
  nowMs: number = Date.now(),
): FastSignals {
  const { network, geo } = computeNetworkSignals(input.ip ?? "", referenceData);
  const userAgent = computeUserAgentSignals(input.userAgent ?? "");
  return {
    network,
    geo,
    userAgent,
    device: computeDeviceSignals(input.device, userAgent, geo, nowMs),
    behavior: computeBehaviorSignals(input.behavior),
    email: computeEmailSignals(input.email ?? "", referenceData),
  };
}

const NOT_LISTED: ListSignals = Object.freeze({ denylisted: false });

/**
 * The full signals object. Without store signals (the comprehensive path
 * failed, timed out or was skipped) the store categories are present but
 * neutral with available = false, and coverage is "partial"; `payment` is
 * then the request's (paymentOf), which keeps the amount category applicable.
 */
export function mergeSignals(
  fastSignals: FastSignals,
  storeSignals: StoreSignals | null,
  lists: ListSignals = NOT_LISTED,
  payment: { amount: number; currency: string } | null = null,
): Signals {
  return {
    coverage: storeSignals === null ? "partial" : "full",
    ...fastSignals,
    ...(storeSignals ?? unavailableStoreSignals(payment)),
    lists: { ...lists },
  };
}
