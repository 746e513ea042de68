import { describe, expect, it } from "vitest";
import { classifyIp, clientNetwork, nat64Client, parseCidr, parseIp, publicClientNetwork, publicIpText } from "../../src/engine/ip.js";
import { IpRangeSet, parseTorExitList } from "../../src/engine/ip-lists.js";
import { TOR_BULK_EXIT_LIST, TOR_EXIT_ADDRESSES } from "./fixtures.js";

function rangeTypeOf(text: string): string {
  const ip = parseIp(text);
  if (ip === null) throw new Error(`${text} did not parse`);
  return classifyIp(ip);
}

describe("parseIp", () => {
  it("parses IPv4 and IPv6 into canonical text", () => {
    expect(parseIp("8.8.8.8")).toEqual({ version: 4, value: 0x08080808, text: "8.8.8.8" });
    expect(parseIp("2001:DB8:0:0:0:0:0:1")?.text).toBe("2001:db8::1");
    expect(parseIp("fe80::1%eth0")?.text).toBe("fe80::1");
    expect(parseIp("2001:db8:0:1:0:0:0:1")?.text).toBe("2001:db8:0:1::1");
    expect(parseIp("::")?.text).toBe("::");
  });

  it("treats IPv4-mapped IPv6 as the IPv4 address", () => {
    expect(parseIp("::ffff:192.0.2.7")).toEqual({ version: 4, value: 0xc0000207, text: "192.0.2.7" });
  });

  it("keeps an address of the NAT64 well-known prefix IPv6, and knows the IPv4 client it carries", () => {
    const nat64 = parseIp("64:ff9b::185.220.101.1");
    expect(nat64).toMatchObject({ version: 6, text: "64:ff9b::b9dc:6501" });
    expect(nat64 && nat64Client(nat64)).toEqual({ version: 4, value: 0xb9dc6501, text: "185.220.101.1" });
    // Only the /96: the local-use prefix 64:ff9b:1::/48 carries no particular mapping.
    const local = parseIp("64:ff9b:1::b9dc:6501");
    expect(local && nat64Client(local)).toBeUndefined();
    // A list range written with the prefix stays the IPv6 range it names, not all of IPv4.
    expect(parseCidr("64:ff9b::/96")?.version).toBe(6);
  });

  it("rejects garbage", () => {
    for (const text of ["", "1.2.3", "256.1.1.1", "1.2.3.4.5", "gggg::1", "localhost"]) {
      expect(parseIp(text)).toBeNull();
    }
  });
});

describe("classifyIp", () => {
  it.each([
    ["8.8.8.8", "public"],
    ["10.0.0.1", "private"],
    ["172.16.5.4", "private"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "cgnat"],
    ["127.0.0.1", "loopback"],
    ["169.254.10.10", "linkLocal"],
    ["192.0.2.1", "documentation"],
    ["198.51.100.1", "documentation"],
    ["203.0.113.9", "documentation"],
    ["224.0.0.251", "multicast"],
    ["0.0.0.0", "unspecified"],
    ["255.255.255.255", "reserved"],
    ["2001:4860:4860::8888", "public"],
    ["::1", "loopback"],
    ["::", "unspecified"],
    ["fe80::1", "linkLocal"],
    ["fd12:3456:789a::1", "uniqueLocal"],
    ["2001:db8::1", "documentation"],
    ["ff02::1", "multicast"],
    ["4000::1", "reserved"],
    // 6to4: the type of the IPv4 address embedded after 2002:
    ["2002:b9dc:6501::1", "public"],
    ["2002:a00:1::", "private"],
    ["2002:7f00:1::5", "loopback"],
    // NAT64: the type of the IPv4 client it carries.
    ["64:ff9b::808:808", "public"],
    ["64:ff9b::7f00:1", "loopback"],
    ["64:ff9b::a00:1", "private"],
  ])("%s is %s", (text, rangeType) => {
    expect(rangeTypeOf(text)).toBe(rangeType);
  });
});

describe("publicIpText", () => {
  it("gives a public address in canonical form, and nothing for any other", () => {
    expect(publicIpText("81.2.69.160")).toBe("81.2.69.160");
    expect(publicIpText("::ffff:81.2.69.160")).toBe("81.2.69.160");
    expect(publicIpText("2001:4860:4860:0:0:0:0:8888")).toBe("2001:4860:4860::8888");
    for (const other of ["", "not an ip", "10.0.0.5", "100.64.0.1", "127.0.0.1", "::1", "::ffff:127.0.0.1", "169.254.10.10", "fd12::1", "203.0.113.9", "0.0.0.0", "224.0.0.251"]) {
      expect(publicIpText(other), other).toBe("");
    }
  });
});

describe("publicClientNetwork", () => {
  it("gives a public IPv4 address, or the /64 of a public IPv6 address, and nothing for any other", () => {
    expect(publicClientNetwork("81.2.69.160")).toBe("81.2.69.160");
    expect(publicClientNetwork("::ffff:81.2.69.160")).toBe("81.2.69.160");
    expect(publicClientNetwork("2a02:c7f:8::1")).toBe("2a02:c7f:8::/64");
    expect(publicClientNetwork("2A02:C7F:8:0:ffff:1:2:f")).toBe("2a02:c7f:8::/64");
    expect(publicClientNetwork("2a02:c7f:8:1::1")).toBe("2a02:c7f:8:1::/64");
    // A NAT64 address is the IPv4 client it carries (its /64 would hold every client behind the translator).
    expect(publicClientNetwork("64:ff9b::808:808")).toBe("8.8.8.8");
    expect(clientNetwork("64:ff9b::808:808")).toBe("8.8.8.8");
    for (const other of ["", "not an ip", "10.0.0.5", "fd12::1", "2002:a00:1::", "2001:db8::1"]) {
      expect(publicClientNetwork(other), other).toBe("");
    }
  });
});

describe("parseCidr", () => {
  it("normalises host bits and computes inclusive bounds", () => {
    expect(parseCidr("10.1.2.3/8")).toEqual({ version: 4, first: 0x0a000000, last: 0x0affffff });
    expect(parseCidr("2001:db8::/32")).toEqual({
      version: 6,
      first: 0x20010db8n << 96n,
      last: (0x20010db8n << 96n) + (1n << 96n) - 1n,
    });
    expect(parseCidr("1.2.3.4")).toEqual({ version: 4, first: 0x01020304, last: 0x01020304 });
    expect(parseCidr("1.2.3.4/33")).toBeNull();
    expect(parseCidr("1.2.3.4/x")).toBeNull();
  });
});

describe("parseTorExitList", () => {
  it("reads the bulk exit list format", () => {
    const exits = parseTorExitList(TOR_BULK_EXIT_LIST);
    expect([...exits].sort()).toEqual(["171.25.193.77", "185.220.101.1", "185.220.101.45", "2a0b:f4c2:2::1"]);
  });

  it("reads ExitAddress lines of the exit-addresses format and skips the others", () => {
    expect([...parseTorExitList(TOR_EXIT_ADDRESSES)].sort()).toEqual(["185.220.101.1", "204.8.96.88"]);
  });
});

describe("IpRangeSet", () => {
  const ranges = IpRangeSet.parse(`# test ranges
203.0.113.0/25
203.0.113.128/25   # adjacent, merges
198.51.100.7
2001:db8:1::/48
not-a-range
`);

  it("matches addresses inside any range", () => {
    const contains = (text: string): boolean => {
      const ip = parseIp(text);
      return ip !== null && ranges.contains(ip);
    };
    expect(ranges.size).toBe(3);
    expect(contains("203.0.113.200")).toBe(true);
    expect(contains("203.0.114.0")).toBe(false);
    expect(contains("198.51.100.7")).toBe(true);
    expect(contains("198.51.100.8")).toBe(false);
    expect(contains("2001:db8:1:ffff::1")).toBe(true);
    expect(contains("2001:db8:2::1")).toBe(false);
  });
});
