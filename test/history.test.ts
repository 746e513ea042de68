import { afterAll, describe, expect, it } from "vitest";
import { entityKeysByKind } from "../src/graph/entities.js";
import { openDatabase } from "../src/store/database.js";
import { HistoryRepository, type HistoryUpdate } from "../src/store/history.js";
import { tempDir } from "./helpers/server.js";

const db = openDatabase(tempDir());
const history = new HistoryRepository(db);
const tenant = { accountId: "acct_history", environment: "live" as const };
afterAll(() => db.close());

const HOUR = 3_600_000;
const start = Date.UTC(2026, 10, 20, 8);

function decide(update: Partial<HistoryUpdate> & { deviceId: string; at: number }) {
  const entities = { userId: "nina", ip: "", email: "", ...update };
  const keys = entityKeysByKind(entities);
  const before = history.snapshot(tenant, entities, keys, update.at);
  history.record(tenant, { country: "", amount: undefined, currency: "", allowed: true, ...entities }, keys, update.at);
  return before;
}

describe("user profile", () => {
  it("learns only from allowed decisions, while every attempt counts in velocity", () => {
    decide({ deviceId: "dev-nina", country: "GB", amount: 45, currency: "EUR", at: start });
    decide({ deviceId: "dev-nina", country: "GB", amount: 60, currency: "EUR", at: start + HOUR });
    // An attacker from Australia, challenged, retries: the retry finds the device, the country and the amount still new.
    const attack = { deviceId: "dev-attacker", country: "AU", amount: 2_000, currency: "EUR", allowed: false };
    decide({ ...attack, at: start + 2 * HOUR });
    const retry = decide({ ...attack, at: start + 2 * HOUR + 1_000 });
    expect(retry.knownDeviceIds).toEqual(["dev-nina"]);
    expect(retry.knownCountries).toEqual(["GB"]);
    expect(retry.previousDecision).toEqual({ atMs: start + HOUR, country: "GB" });
    expect(retry.amountHistory).toEqual({ EUR: { count: 2, max: 60, mean: 52.5 } });
    expect(retry.counts.user.lastMinute).toBe(1);
    // The real user, back from Britain, is measured from her own last decision, not the attacker's.
    expect(decide({ deviceId: "dev-nina", country: "GB", at: start + 2 * HOUR + 60_000 }).previousDecision).toEqual({ atMs: start + HOUR, country: "GB" });
  });

  it("measures travel from the last decision whose IP had a country", () => {
    const located = start + 10 * HOUR;
    decide({ deviceId: "dev-nina", country: "AU", at: located });
    // 23 hours later from a private address (no country), then from Britain five minutes after that.
    decide({ deviceId: "dev-nina", country: "", at: located + 23 * HOUR });
    const next = decide({ deviceId: "dev-nina", country: "GB", at: located + 23 * HOUR + 5 * 60_000 });
    expect(next.previousDecision).toEqual({ atMs: located, country: "AU" });
  });

  it("takes an earlier decision labelled legitimate as the last location when the profile has none", () => {
    const omar = { userId: "omar", ip: "", email: "" };
    const at = start + 40 * HOUR;
    // Allowed from a private address (no country): the profile begins without a location.
    decide({ ...omar, deviceId: "dev-omar", country: "", at });
    // A challenge from Britain an hour before, which feedback then labels legitimate, teaches the profile.
    db.transaction(() => history.learn(tenant, { userId: "omar", deviceId: "dev-omar", country: "GB", amount: undefined, currency: "" }, at - HOUR))();
    const next = decide({ ...omar, deviceId: "dev-omar", country: "GB", at: at + HOUR });
    expect(next.previousDecision).toEqual({ atMs: at - HOUR, country: "GB" });
  });
});

describe("distinct users of a device over the sliding day", () => {
  it("counts a user seen on both sides of midnight once", () => {
    const evening = Date.UTC(2026, 10, 20, 20);
    const usersOfLaptop = (userId: string, at: number) => {
      const entities = { userId, ip: "", deviceId: "family-laptop", email: "" };
      const keys = entityKeysByKind(entities);
      const seen = history.snapshot(tenant, entities, keys, at).distinctUsersPerDevice24h;
      history.record(tenant, { ...entities, country: "GB", amount: undefined, currency: "", allowed: true }, keys, at);
      return seen;
    };
    expect(usersOfLaptop("partner-a", evening)).toBe(1);
    expect(usersOfLaptop("partner-b", evening + HOUR)).toBe(2);
    // The next morning the same two use it again: still two, not three (the multi-account threshold).
    expect(usersOfLaptop("partner-a", evening + 11 * HOUR)).toBe(2);
    expect(usersOfLaptop("partner-b", evening + 12 * HOUR)).toBe(2);
    expect(usersOfLaptop("partner-a", evening + 13 * HOUR)).toBe(2);
    // A third person is a third user.
    expect(usersOfLaptop("lodger", evening + 14 * HOUR)).toBe(3);
  });
});

describe("an account's typical payment", () => {
  it("is learnt from allowed payments in each currency, zero amounts left out", () => {
    const shop = { accountId: "acct_shop", environment: "live" as const };
    const pay = (userId: string, amount: number, currency: string, allowed = true) => {
      const entities = { userId, ip: "", deviceId: "", email: "" };
      history.record(shop, { ...entities, country: "GB", amount, currency, allowed }, entityKeysByKind(entities), start);
    };
    pay("a", 20, "EUR");
    pay("b", 80, "EUR");
    pay("c", 0, "EUR");
    pay("d", 5_000, "EUR", false);
    pay("e", 1_000, "JPY");
    const entities = { userId: "f", ip: "", deviceId: "", email: "" };
    const seen = history.snapshot(shop, entities, entityKeysByKind(entities), start, "EUR").accountAmounts;
    expect(seen?.count).toBe(2);
    expect(Math.exp(seen?.logMean ?? 0)).toBeCloseTo(40, 6);
    expect(history.snapshot(shop, entities, entityKeysByKind(entities), start).accountAmounts).toBeNull();
  });
});

describe("velocity across a window boundary", () => {
  it("sees a burst that straddles the minute", () => {
    const burstAt = Date.UTC(2026, 10, 20, 10, 0, 50);
    const entities = { userId: "burster", ip: "", deviceId: "", email: "" };
    const keys = entityKeysByKind(entities);
    for (let i = 0; i < 5; i++) history.record(tenant, { ...entities, country: "GB", amount: undefined, currency: "", allowed: true }, keys, burstAt + i * 1_000);
    expect(history.snapshot(tenant, entities, keys, burstAt + 15_000).counts.user.lastMinute).toBe(5);
  });

  it("still counts what it holds when decides of the next bucket were stored first (concurrent decides across the boundary)", () => {
    // Midnight: the minute's, the hour's and the day's boundary at once.
    const boundary = Date.UTC(2026, 10, 21, 0, 0, 0);
    const entities = { userId: "straddler", ip: "", deviceId: "", email: "" };
    const keys = entityKeysByKind(entities);
    const record = (at: number) => history.record(tenant, { ...entities, country: "GB", amount: undefined, currency: "", allowed: true }, keys, at);
    // Five decides just before midnight, then two just after it stored before one that began before it is read.
    for (let i = 0; i < 5; i++) record(boundary - 900 + i * 100);
    record(boundary + 50);
    record(boundary + 80);
    const counts = history.snapshot(tenant, entities, keys, boundary - 10).counts.user;
    // Its own minute (the row's previous bucket) and the decides after it; it read 0 in every window.
    expect(counts).toEqual({ lastMinute: 7, lastHour: 7, lastDay: 7 });
  });
});


describe("a user's payments", () => {
  it("leave zero amounts out, so a first real payment after free orders is measured", () => {
    const shop = { accountId: "acct_free_orders", environment: "live" as const };
    const entities = { userId: "trial", ip: "", deviceId: "", email: "" };
    const keys = entityKeysByKind(entities);
    for (let i = 0; i < 3; i++) history.record(shop, { ...entities, country: "CH", amount: 0, currency: "CHF", allowed: true }, keys, start + i * HOUR);
    history.record(shop, { ...entities, country: "CH", amount: 40, currency: "CHF", allowed: true }, keys, start + 3 * HOUR);
    expect(history.snapshot(shop, entities, keys, start + 4 * HOUR).amountHistory).toEqual({ CHF: { count: 1, max: 40, mean: 40 } });
  });
});

describe("an IPv6 client", () => {
  it("is counted as its /64: moving to another address of the prefix starts no fresh count", () => {
    const shop = { accountId: "acct_ipv6", environment: "live" as const };
    const at = Date.UTC(2026, 10, 20, 12);
    for (let i = 1; i <= 12; i++) {
      const entities = { userId: `signup-${i}`, ip: `2a02:c7f:8::${i.toString(16)}`, deviceId: "", email: "" };
      history.record(shop, { ...entities, country: "GB", amount: undefined, currency: "", allowed: true }, entityKeysByKind(entities), at + i);
    }
    const next = { userId: "signup-13", ip: "2a02:c7f:8:0:abcd::1", deviceId: "", email: "" };
    const seen = history.snapshot(shop, next, entityKeysByKind(next), at + 1_000);
    expect(seen.counts.ip.lastMinute).toBe(12);
    expect(seen.distinctUsersPerIp24h).toBe(13);
    // The next /64 is another client.
    const neighbour = { userId: "signup-14", ip: "2a02:c7f:8:1::1", deviceId: "", email: "" };
    expect(history.snapshot(shop, neighbour, entityKeysByKind(neighbour), at + 1_000).counts.ip.lastMinute).toBe(0);
  });
});

describe("pruning the windowed counters", () => {
  const rows = () =>
    Object.fromEntries(
      ["velocity_counters", "entity_users", "entity_user_counts", "user_profiles"].map((table) => [table, (db.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE account_id = ?`).get(tenant.accountId) as { n: number }).n]),
    );

  it("deletes the rows no window reads any more, a step of 1,000 rows at a time, and reads the same counts after", async () => {
    const prunedTenant = { accountId: "acct_pruned", environment: "live" as const };
    const day0 = Date.UTC(2026, 10, 1, 12);
    const DAY = 24 * HOUR;
    const at = (userId: string, deviceId: string, when: number) => {
      const entities = { userId, ip: "81.2.69.160", deviceId, email: "" };
      const keys = entityKeysByKind(entities);
      history.record(prunedTenant, { ...entities, country: "GB", amount: undefined, currency: "", allowed: true }, keys, when);
      return () => history.snapshot(prunedTenant, entities, keys, when + 1);
    };
    // 1,500 users three days ago (more than a step), a few two days ago, yesterday and today.
    for (let i = 0; i < 1_500; i++) at(`old_${i}`, `dev_old_${i}`, day0);
    at("two_days", "dev_two", day0 + 2 * DAY);
    at("yesterday", "dev_shared", day0 + 3 * DAY - HOUR);
    const now = day0 + 3 * DAY;
    const today = at("today", "dev_shared", now);
    const before = today();
    const count = (table: string) => (db.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE account_id = ?`).get(prunedTenant.accountId) as { n: number }).n;
    const profilesBefore = count("user_profiles");
    const othersBefore = rows();

    const deleted = await history.pruneOutdated(now);
    // Each old user's four counters (user, IP, device, and none for the empty e-mail: three) and the device's
    // and IP's distinct users of that day; the shared IP's counter is still in use.
    expect(deleted).toBeGreaterThan(1_500 * 3);
    expect(count("velocity_counters")).toBeLessThan(10);
    expect(db.prepare("SELECT MIN(day) AS day FROM entity_users WHERE account_id = ?").get(prunedTenant.accountId)).toEqual({ day: Math.floor(now / DAY) - 1 });
    expect(count("user_profiles")).toBe(profilesBefore);
    // What the windows read is what they read before.
    expect(today()).toEqual(before);
    expect(before.distinctUsersPerDevice24h).toBe(2);
    // Another account's rows, not outdated at this time, are left alone.
    expect(rows()).toEqual(othersBefore);
    expect(await history.pruneOutdated(now)).toBe(0);
  });
});

describe("e-mail velocity", () => {
  it("counts the +tag and Gmail dot spellings of one inbox as one e-mail", () => {
    const at = start + 100 * HOUR;
    for (let i = 1; i <= 8; i++) decide({ userId: `promo-${i}`, deviceId: "", email: `jane.doe+promo${i}@gmail.com`, at: at + i * 1_000 });
    const dotted = decide({ userId: "promo-9", deviceId: "", email: "J.AneDoe@googlemail.com", at: at + 9_000 });
    expect(dotted.counts.email).toEqual({ lastMinute: 8, lastHour: 8, lastDay: 8 });
    // Another domain's dots are another mailbox's.
    expect(decide({ userId: "promo-10", deviceId: "", email: "j.anedoe@example.com", at: at + 10_000 }).counts.email.lastMinute).toBe(0);
  });
});
