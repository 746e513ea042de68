import { describe, expect, it } from "vitest";
import { DecisionsInFlight } from "../src/decisions/in-flight.js";
import { entityKeysByKind } from "../src/graph/entities.js";

const tenant = { accountId: "acct_a", environment: "live" as const };
const keys = entityKeysByKind({ userId: "u1", ip: "81.2.69.160", deviceId: "dev_1", email: "" });

describe("decides in flight", () => {
  it("count the attempts of one Idempotency-Key as one decide, stored under whichever attempt is", () => {
    const inFlight = new DecisionsInFlight();
    const first = inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_A", idempotencyKey: "order-1" });
    const retry = inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_B", idempotencyKey: "order-1" });
    // The retry is told of no decide before it: the first attempt is its own.
    expect(retry.counts.decisions.user).toEqual([]);
    const other = inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_C" });
    // One decide in flight before it, stored as dec_A or dec_B, whichever is.
    expect(other.counts.decisions.user).toEqual([["dec_A", "dec_B"]]);
    // The first attempt fails: the retry, still in flight, is the decide the next one counts (dec_A is never
    // stored, so the group counts as one until dec_B is).
    first.release();
    const next = inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_D" });
    expect(next.counts.decisions.user).toEqual([["dec_A", "dec_B"], ["dec_C"]]);
    for (const ticket of [retry, other, next]) ticket.release();
    expect(inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_E" }).counts.decisions.user).toEqual([]);
  });

  it("keep naming the stored attempt of an Idempotency-Key while a retry of it is still in flight", () => {
    // dec_A is stored (its counts are in the counters) and released; the retry dec_B, still in flight, will
    // replay dec_A's answer and never be stored. A decide admitted now must be told dec_A with it: told dec_B
    // alone, the engine finds it not stored and counts the one decide a second time.
    const inFlight = new DecisionsInFlight();
    const first = inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_A", idempotencyKey: "order-1" });
    const retry = inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_B", idempotencyKey: "order-1" });
    first.release();
    expect(inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_C" }).counts.decisions.user).toEqual([["dec_A", "dec_B"]]);
    retry.release();
    expect(inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_D" }).counts.decisions.user).toEqual([["dec_C"]]);
  });

  it("keeps accounts and environments apart, and tells a decide the users of the others on its device", () => {
    const inFlight = new DecisionsInFlight();
    inFlight.admit({ tenant, keys, userId: "u1", decisionId: "dec_A" });
    inFlight.admit({ tenant, keys: entityKeysByKind({ userId: "u2", ip: "81.2.69.160", deviceId: "dev_1", email: "" }), userId: "u2", decisionId: "dec_B" });
    const test = inFlight.admit({ tenant: { ...tenant, environment: "test" }, keys, userId: "u3", decisionId: "dec_C" });
    expect(test.counts).toEqual({ decisions: { user: [], ip: [], device: [], email: [] }, users: { device: [], ip: [] } });
    const third = inFlight.admit({ tenant, keys: entityKeysByKind({ userId: "u3", ip: "81.2.69.160", deviceId: "dev_1", email: "" }), userId: "u3", decisionId: "dec_D" });
    expect(third.counts.users.device).toEqual(["u1", "u2"]);
    expect(third.counts.decisions.device).toEqual([["dec_A"], ["dec_B"]]);
  });
});
