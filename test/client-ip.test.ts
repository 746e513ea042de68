import { describe, expect, it } from "vitest";
import { ClientIpResolver, parseTrustedRange } from "../src/server/client-ip.js";

describe("client IP resolution", () => {
  it("uses the connection address and ignores X-Forwarded-For without trusted proxies", () => {
    const resolver = new ClientIpResolver([]);
    expect(resolver.resolve("203.0.113.9", "198.51.100.1")).toBe("203.0.113.9");
    expect(resolver.resolve("::ffff:203.0.113.9", undefined)).toBe("203.0.113.9");
  });

  it("believes X-Forwarded-For from a trusted proxy, up to the first untrusted hop", () => {
    const resolver = new ClientIpResolver(["10.0.0.0/8", "2001:db8::1"]);
    expect(resolver.resolve("10.1.2.3", "81.2.69.160")).toBe("81.2.69.160");
    // A client cannot smuggle an address in front of the real chain.
    expect(resolver.resolve("10.1.2.3", "6.6.6.6, 81.2.69.160, 10.9.9.9")).toBe("81.2.69.160");
    expect(resolver.resolve("2001:db8::1", ["2a00:1450::1"])).toBe("2a00:1450::1");
    // An untrusted peer's header is ignored.
    expect(resolver.resolve("81.2.69.160", "10.0.0.1")).toBe("81.2.69.160");
    // What lies beyond the first untrusted hop is never read, garbage or not.
    expect(resolver.resolve("10.1.2.3", "not-an-ip, 81.2.69.161")).toBe("81.2.69.161");
  });

  it("reads hops that carry a port, and stops at a hop that is no address", () => {
    const resolver = new ClientIpResolver(["10.0.0.0/8", "2001:db8::1"]);
    expect(resolver.resolve("10.1.2.3", "8.8.8.8, 81.2.69.160:4711")).toBe("81.2.69.160");
    expect(resolver.resolve("10.1.2.3", "8.8.8.8, [2a00:1450::1]:443")).toBe("2a00:1450::1");
    expect(resolver.resolve("10.1.2.3", "[2a00:1450::1]")).toBe("2a00:1450::1");
    // The proxy could not tell who its client was: the address before it, written by that client, is not
    // believed; the proxy itself is the nearest address anyone vouches for.
    expect(resolver.resolve("10.1.2.3", "8.8.8.8, unknown")).toBe("10.1.2.3");
    expect(resolver.resolve("10.1.2.3", "8.8.8.8, unknown, 10.9.9.9")).toBe("10.9.9.9");
  });

  it("refuses a malformed trusted proxy setting at start", () => {
    expect(() => new ClientIpResolver(["proxy.internal"])).toThrow(/FRAUD_TRUSTED_PROXIES/);
    for (const entry of ["10.0.0.0/", "/8", "10.0.0.0/33", "::1/129", "10.0.0.0/8/8", "10.0.0.0/+8"]) {
      expect(parseTrustedRange(entry), entry).toEqual({ problem: expect.stringMatching(/is not an address or CIDR range/) });
    }
  });

  it("refuses a range that would trust every IPv4 peer, however it is written", () => {
    // ::ffff:10.0.0.0/8 reads as 10.0.0.0/8 but is ::/8: it holds all of ::ffff:0:0/96, every IPv4 address.
    for (const entry of ["0.0.0.0/0", "::/0", "::/64", "::/80", "::ffff:0:0/96", "::ffff:10.0.0.0/8"]) {
      expect(parseTrustedRange(entry), entry).toEqual({ problem: expect.stringMatching(/holds every IPv4 address/) });
      expect(() => new ClientIpResolver([entry]), entry).toThrow(/FRAUD_TRUSTED_PROXIES/);
    }
    // Written with the IPv6 prefix length, an IPv4-mapped range is the IPv4 range it looks like.
    const resolver = new ClientIpResolver(["::ffff:10.0.0.0/104"]);
    expect(resolver.resolve("10.1.2.3", "81.2.69.160")).toBe("81.2.69.160");
    expect(resolver.resolve("9.9.9.9", "6.6.6.6")).toBe("9.9.9.9");
  });
});
