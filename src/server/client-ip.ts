import { BlockList, isIP } from "node:net";

/**
 * Finds the end client's address. X-Forwarded-For is believed only when the
 * connection comes from a configured trusted proxy, and then only as far as
 * the chain stays inside trusted proxies: anyone can write that header.
 */
export class ClientIpResolver {
  private readonly trusted = new BlockList();
  private readonly hasTrusted: boolean;

  constructor(trustedProxies: readonly string[]) {
    for (const entry of trustedProxies) {
      const [address, bits] = entry.split("/");
      const family = isIP(address ?? "");
      if (family === 0) throw new Error(`FRAUD_TRUSTED_PROXIES: "${entry}" is not an address or CIDR range`);
      const type = family === 4 ? "ipv4" : "ipv6";
      if (bits === undefined) this.trusted.addAddress(address as string, type);
      else this.trusted.addSubnet(address as string, Number(bits), type);
    }
    this.hasTrusted = trustedProxies.length > 0;
  }

  resolve(remoteAddress: string | undefined, forwardedFor: string | string[] | undefined): string {
    const peer = normalize(remoteAddress ?? "");
    if (!this.hasTrusted || !this.isTrusted(peer) || forwardedFor === undefined) return peer;
    const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(",") : forwardedFor)
      .split(",")
      .map((hop) => normalize(hop.trim()))
      .filter((hop) => isIP(hop) !== 0);
    // Walk from the nearest hop back; the first untrusted address is the client.
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hops[i] as string;
      if (!this.isTrusted(hop)) return hop;
    }
    return hops[0] ?? peer;
  }

  private isTrusted(address: string): boolean {
    const family = isIP(address);
    return family !== 0 && this.trusted.check(address, family === 4 ? "ipv4" : "ipv6");
  }
}

/** "::ffff:1.2.3.4" (IPv4 on a dual-stack socket) is reported as "1.2.3.4". */
function normalize(address: string): string {
  return address.startsWith("::ffff:") && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}
