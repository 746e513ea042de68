import type { DecisionWriter } from "../decisions/writer.js";
import type { EventPublisher } from "../events/publisher.js";
import { newId } from "../ids.js";
import type { Tenant } from "../store/tenant.js";

/** Decisions per window; the rule compares the latest window with the one before it. */
export const ANOMALY_WINDOW = 50;
/** The latest window's deny share that can raise an anomaly, in percent. */
export const DENY_RATE_THRESHOLD_PERCENT = 50;
/** How far above the previous window's deny share the latest must be, in percentage points. */
export const DENY_RATE_JUMP_POINTS = 30;
/** After an anomaly, an account and environment raises no other for this long. */
export const ANOMALY_COOL_DOWN_MS = 60 * 60 * 1000;

interface Outcome {
  deny: boolean;
  at: number;
}

/** The last two windows of one account and environment, oldest first, with running deny counts. */
class DecisionWindows {
  readonly outcomes: Outcome[] = [];
  previousDenies = 0;
  latestDenies = 0;
  quietUntil = 0;

  /** Adds an outcome; O(1): only the two outcomes that cross a window boundary move between the counts. */
  push(outcome: Outcome): void {
    this.outcomes.push(outcome);
    if (outcome.deny) this.latestDenies++;
    if (this.outcomes.length > ANOMALY_WINDOW) {
      // The oldest outcome of the latest window moves into the previous one.
      if ((this.outcomes[this.outcomes.length - 1 - ANOMALY_WINDOW] as Outcome).deny) {
        this.latestDenies--;
        this.previousDenies++;
      }
    }
    if (this.outcomes.length > 2 * ANOMALY_WINDOW) {
      if ((this.outcomes.shift() as Outcome).deny) this.previousDenies--;
    }
  }

  full(): boolean {
    return this.outcomes.length === 2 * ANOMALY_WINDOW;
  }
}

function severity(denyRate: number): "low" | "medium" | "high" {
  if (denyRate >= 0.8) return "high";
  if (denyRate >= 0.65) return "medium";
  return "low";
}

/**
 * anomaly.detected, kind deny_rate_spike (docs/webhooks.md): among an
 * account's last 50 decisions in one environment at least half were denies,
 * and that share is at least 30 points above the 50 decisions before them.
 * One event per account and environment per hour at most.
 *
 * The check runs on the request thread just before the decision goes to the
 * decision writer, on counts kept in memory, so it costs a few additions per
 * decision, and its event is committed with the decision. A write that then
 * fails has still been counted.
 * The windows start empty when the process starts.
 */
export function registerAnomalyDetection(writer: DecisionWriter, events: EventPublisher): void {
  const windows = new Map<string, DecisionWindows>();
  const windowsOf = (tenant: Tenant): DecisionWindows => {
    const key = `${tenant.accountId}/${tenant.environment}`;
    let found = windows.get(key);
    if (!found) {
      found = new DecisionWindows();
      windows.set(key, found);
    }
    return found;
  };
  writer.addEffect(({ tenant, decision, now }) => {
    const state = windowsOf(tenant);
    state.push({ deny: decision.decision === "deny", at: now });
    if (!state.full() || now < state.quietUntil) return;
    // Compared in whole numbers: as fractions, 35 of 50 against 20 of 50 is 0.7 - 0.4 = 0.29999999999999993,
    // short of a 30-point jump it is.
    if (state.latestDenies * 100 < DENY_RATE_THRESHOLD_PERCENT * ANOMALY_WINDOW) return;
    if ((state.latestDenies - state.previousDenies) * 100 < DENY_RATE_JUMP_POINTS * ANOMALY_WINDOW) return;
    const denyRate = state.latestDenies / ANOMALY_WINDOW;
    const baseline = state.previousDenies / ANOMALY_WINDOW;
    state.quietUntil = now + ANOMALY_COOL_DOWN_MS;
    const latest = state.outcomes.slice(ANOMALY_WINDOW);
    events.publish(tenant, "anomaly.detected", {
      anomalyId: newId("anm", now),
      kind: "deny_rate_spike",
      severity: severity(denyRate),
      description: `${state.latestDenies} of the last ${ANOMALY_WINDOW} decisions were denies (${Math.round(denyRate * 100)} %), against ${Math.round(baseline * 100)} % in the ${ANOMALY_WINDOW} before them`,
      metrics: { windowDecisions: ANOMALY_WINDOW, denies: state.latestDenies, denyRate, baselineDenyRate: baseline },
      windowStart: new Date((latest[0] as Outcome).at).toISOString(),
      windowEnd: new Date(now).toISOString(),
    });
  });
}
