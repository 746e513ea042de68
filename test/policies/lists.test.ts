import { describe, expect, it } from "vitest";
import {
  ListSnapshot,
  compilePolicyUncached,
  evaluatePolicies,
  isValidListName,
  isUsableNewListName,
  normalizeListEntry,
} from "../../src/policies/index.js";
import type { CompiledPolicy, ListMatcher } from "../../src/policies/index.js";
import { context, policy } from "./fixtures.js";

const ENTRIES = 100_000;

function compiled(condition: string): CompiledPolicy {
  const result = compilePolicyUncached(policy([{ condition, action: "deny" }]));
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.policy;
}

const ipv4 = (n: number): string => `${(n >>> 24) & 255}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;

/** 100,000 entries per kind; the IP list mixes single addresses with IPv4 /24s and IPv6 /48s. */
function bigSnapshot(): ListSnapshot {
  const users: string[] = [];
  const emails: string[] = [];
  const devices: string[] = [];
  const ips: string[] = [];
  for (let i = 0; i < ENTRIES; i++) {
    users.push(`user_${i}`);
    emails.push(`Person${i}@Example.com`);
    devices.push(`vis_${i.toString(36)}`);
    if (i % 4 === 0) ips.push(`${ipv4(0x0b000000 + i * 256)}/24`); // 11.x.y.0/24
    else if (i % 4 === 1) ips.push(`2001:db8:${(i >>> 16).toString(16)}:${(i & 0xffff).toString(16)}::/64`);
    else ips.push(ipv4(0x50000000 + i)); // 80.x.y.z
  }
  return ListSnapshot.build([
    { name: "vip_users", kind: "user", entries: users },
    { name: "bad_emails", kind: "email", entries: emails },
    { name: "bad_devices", kind: "device", entries: devices },
    { name: "blocked_ips", kind: "ip", entries: ips },
  ]);
}

describe("lists in conditions", () => {
  const lists = bigSnapshot();
  const matched = (condition: string, overrides: Parameters<typeof context>[0]): boolean => {
    const evaluation = evaluatePolicies([compiled(condition)], context({ ...overrides, lists }));
    expect(evaluation.results[0]?.errors).toEqual([]);
    return evaluation.results[0]?.matchedRule === 0;
  };

  it("tests user ids, e-mails and device ids at 100,000 entries", () => {
    expect(matched("userId in lists.vip_users", { userId: "user_99999" })).toBe(true);
    expect(matched("userId in lists.vip_users", { userId: "user_100000" })).toBe(false);
    expect(matched("email in lists.bad_emails", { email: "person42@example.com" })).toBe(true);
    expect(matched("email in lists.bad_emails", { email: "PERSON42@EXAMPLE.COM" })).toBe(true);
    expect(matched("deviceId in lists.bad_devices", { deviceId: `vis_${(77_777).toString(36)}` })).toBe(true);
    expect(matched("NOT (deviceId in lists.bad_devices)", { deviceId: "vis_unknown" })).toBe(true);
    // No entry is longer than 320 characters: a text longer than they can take is none, and is not lowercased.
    const long = `${"a".repeat(300)}@example.com`;
    const emoji = `${"😀".repeat(165)}@example.com`; // 177 characters, 342 UTF-16 units
    const padded = ListSnapshot.build([{ name: "long", kind: "email", entries: [long, emoji] }]);
    expect(padded.contains("long", long.toUpperCase())).toBe(true);
    expect(padded.contains("long", emoji)).toBe(true);
    expect(padded.contains("long", `${long}${" ".repeat(400)}`)).toBe(false);
  });

  it("matches single IPv4 addresses and addresses inside listed IPv4 and IPv6 ranges", () => {
    expect(matched("ip in lists.blocked_ips", { ip: ipv4(0x50000000 + 2) })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: ipv4(0x50000000 + 3) })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: ipv4(0x50000000 + 4) })).toBe(false);
    // Inside 11.0.0.0/24 (i = 0) and 11.0.4.0/24 (i = 4), not 11.0.1.0/24 (i = 1 is IPv6).
    expect(matched("ip in lists.blocked_ips", { ip: "11.0.0.255" })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: "11.0.4.17" })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: "11.0.1.17" })).toBe(false);
    // i = 99_997 → 2001:db8:1:869d::/64.
    expect(matched("ip in lists.blocked_ips", { ip: "2001:db8:1:869d:abcd::1" })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: "2001:DB8:1:869D:0:0:0:FFFF" })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: "2001:db8:1:869e::1" })).toBe(false);
    // IPv4-mapped IPv6 is the IPv4 address it carries.
    expect(matched("ip in lists.blocked_ips", { ip: "::ffff:11.0.0.9" })).toBe(true);
    expect(matched("ip in lists.blocked_ips", { ip: "not an ip" })).toBe(false);
    expect(matched("ip in lists.blocked_ips", { ip: "" })).toBe(false);
  });

  it("combines with signals.network.ip and other lists", () => {
    const signals = context().signals;
    signals.network.ip = "11.0.8.1";
    expect(matched("signals.network.ip in lists.blocked_ips OR userId in lists.vip_users", { signals })).toBe(true);
  });

  it("answers 2,000 lookups in lists of 100,000 entries, ranges and addresses alike", () => {
    // How fast is bench/policies.ts's question; that each `in` is one membership test, never a scan, is the
    // next describe's. Here: every answer is right. 11.0.x.7 lies in a listed /24 when x is a multiple of 4.
    const program = [compiled("ip in lists.blocked_ips AND email in lists.bad_emails")];
    const contexts = Array.from({ length: 2000 }, (_, i) =>
      context({ lists, ip: `11.0.${i % 256}.7`, email: `person${i}@example.com` }),
    );
    const matches = contexts.map((ctx) => evaluatePolicies(program, ctx).results[0]?.matchedRule === 0);
    expect(matches).toEqual(contexts.map((_, i) => i % 4 === 0));
  });
});

describe("list lookups cost one membership test", () => {
  it("asks the matcher once per `in` and never enumerates", () => {
    let calls = 0;
    const counting: ListMatcher = {
      kind: "user",
      has: (value) => {
        calls++;
        return value === "user_1";
      },
    };
    const lists = new ListSnapshot(new Map([["vip", counting]]));
    const evaluation = evaluatePolicies([compiled("userId in lists.vip")], context({ lists, userId: "user_1" }));
    expect(evaluation.results[0]?.matchedRule).toBe(0);
    expect(calls).toBe(1);
  });
});

describe("ListSnapshot", () => {
  it("records a missing list as a rule error, not a match", () => {
    const evaluation = evaluatePolicies([compiled("userId in lists.nope")], context());
    expect(evaluation.results[0]).toMatchObject({
      matchedRule: -1,
      errors: [{ ruleIndex: 0, message: "list 'nope' does not exist" }],
    });
  });

  it("answers membership outside CEL too", () => {
    const lists = ListSnapshot.build([{ name: "office", kind: "ip", entries: ["10.0.0.0/8", "fd00::/8"] }]);
    expect(lists.contains("office", "10.200.3.4")).toBe(true);
    expect(lists.contains("office", "fd12::1")).toBe(true);
    expect(lists.contains("office", "11.0.0.1")).toBe(false);
    expect(lists.contains("other", "10.0.0.1")).toBe(false);
  });

  it("takes a NAT64 address and the IPv4 client it carries for one client, in either direction", () => {
    const lists = ListSnapshot.build([
      { name: "blocked", kind: "ip", entries: ["185.220.101.1", "64:ff9b::203.0.113.9", "198.51.100.0/24"] },
    ]);
    // The client's entries match it seen through a NAT64 translator, addresses and ranges alike...
    expect(lists.contains("blocked", "64:ff9b::185.220.101.1")).toBe(true);
    expect(lists.contains("blocked", "64:ff9b::c633:6407")).toBe(true); // 198.51.100.7
    // ...and an entry written as the NAT64 address (a fraud label's) matches the client over IPv4.
    expect(lists.contains("blocked", "203.0.113.9")).toBe(true);
    expect(lists.contains("blocked", "64:ff9b::203.0.113.9")).toBe(true);
    // Other addresses of the prefix, and the client's neighbours, are not matched.
    expect(lists.contains("blocked", "64:ff9b::185.220.101.2")).toBe(false);
    expect(lists.contains("blocked", "203.0.113.10")).toBe(false);
    expect(lists.contains("blocked", "64:ff9b:1::185.220.101.1")).toBe(false);
  });

  it("refuses bad names, duplicates and invalid entries", () => {
    expect(() => ListSnapshot.build([{ name: "bad-name", kind: "user", entries: [] }])).toThrow(/invalid list name/);
    expect(() =>
      ListSnapshot.build([
        { name: "a", kind: "user", entries: [] },
        { name: "a", kind: "email", entries: [] },
      ]),
    ).toThrow(/duplicate list name/);
    expect(() => ListSnapshot.build([{ name: "ips", kind: "ip", entries: ["10.0.0.0/33"] }])).toThrow(
      "list 'ips': invalid ip entry '10.0.0.0/33'",
    );
  });

  it("normalizes entries the way lookups compare them", () => {
    expect(normalizeListEntry("email", " Jane@Example.COM ")).toBe("jane@example.com");
    expect(normalizeListEntry("ip", "::ffff:10.0.0.1")).toBe("10.0.0.1");
    expect(normalizeListEntry("ip", "2001:DB8:0:0::1")).toBe("2001:db8::1");
    expect(normalizeListEntry("ip", "10.0.0.0/8")).toBe("10.0.0.0/8");
    // One range, one entry, however it is written: removing any spelling removes it.
    for (const spelling of ["10.1.2.3/16", "10.1.0.0/16", "::ffff:10.1.0.0/112", " 10.1.255.255/16 "]) {
      expect(normalizeListEntry("ip", spelling), spelling).toBe("10.1.0.0/16");
    }
    expect(normalizeListEntry("ip", "2001:DB8:0::/32")).toBe("2001:db8::/32");
    // A range of one address is the address: one entry, however it is written.
    expect(normalizeListEntry("ip", "2001:db8::1/128")).toBe("2001:db8::1");
    expect(normalizeListEntry("ip", "10.0.0.1/32")).toBe("10.0.0.1");
    expect(normalizeListEntry("ip", "::ffff:10.0.0.1/128")).toBe("10.0.0.1");
    expect(normalizeListEntry("ip", "0.0.0.0/0")).toBe("0.0.0.0/0");
    // A NAT64 address is the IPv4 client it carries; a range over the prefix stays what it says.
    expect(normalizeListEntry("ip", "64:ff9b::81.2.69.161")).toBe("81.2.69.161");
    expect(normalizeListEntry("ip", "64:FF9B::5102:45A1/128")).toBe("81.2.69.161");
    expect(normalizeListEntry("ip", "64:ff9b::/96")).toBe("64:ff9b::/96");
    expect(normalizeListEntry("ip", "64:ff9b::5102:4500/120")).toBe("64:ff9b::5102:4500/120");
    expect(normalizeListEntry("ip", "10.0.0.256")).toBeNull();
    // A zone belongs to an IPv6 address and names something: an IPv4 address or an empty zone is no IP.
    expect(normalizeListEntry("ip", "fe80::1%eth0")).toBe("fe80::1");
    for (const notAnIp of ["10.0.0.1%eth0", "10.0.0.0%x/8", "fe80::1%", "fe80::1%/64"]) expect(normalizeListEntry("ip", notAnIp), notAnIp).toBeNull();
    expect(ListSnapshot.build([{ name: "ips", kind: "ip", entries: ["10.0.0.1"] }]).contains("ips", "10.0.0.1%x")).toBe(false);
    expect(normalizeListEntry("user", "  ")).toBeNull();
    // User and device ids are kept as decide compares them: exactly.
    expect(normalizeListEntry("user", " alice ")).toBe(" alice ");
    expect(normalizeListEntry("device", "vis_AbC")).toBe("vis_AbC");
    expect(isValidListName("blocked_ips")).toBe(true);
    expect(isValidListName("1st")).toBe(false);
    // Names a rule could never write after `lists.`: no new list takes them (older ones stay lists).
    for (const name of ["null", "in", "true", "AND", "NOT"]) {
      expect(isUsableNewListName(name), name).toBe(false);
      expect(isValidListName(name), name).toBe(true);
    }
    expect(isUsableNewListName("android")).toBe(true);
  });
});
