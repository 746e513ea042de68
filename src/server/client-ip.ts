import { BlockList, isIP } from "node:net";

/** A trusted proxy entry: one address, or a CIDR range. */
export interface TrustedRange {
  address: string;
  /** Undefined for a single address. */
  prefix: number | undefined;
  family: "ipv4" | "ipv6";
}

/**
 * One FRAUD_TRUSTED_PROXIES entry, checked, or why it is refused. A range
 * that holds every IPv4 address is refused: `0.0.0.0/0`, but also IPv6
 * ranges over `::ffff:0:0/96` such as `::/64` or `::ffff:10.0.0.0/8` (which
 * is `::/8`, not 10.0.0.0/8), since the block list matches IPv4 peers
 * against IPv6 ranges in that form: believing everybody's X-Forwarded-For
 * would let any client choose the address it is scored by.
 */
export function parseTrustedRange(entry: string): TrustedRange | { problem: string } {
  const [address = "", bits, extra] = entry.split("/");
  const version = isIP(address);
  const maxBits = version === 6 ? 128 : 32;
  if (version === 0 || extra !== undefined || (bits !== undefined && !(/^\d{1,3}$/.test(bits) && Number(bits) <= maxBits))) {
    return { problem: `"${entry}" is not an address or CIDR range (for example 10.0.0.0/8 or 2001:db8::/32)` };
  }
  const range: TrustedRange = { address, prefix: bits === undefined ? undefined : Number(bits), family: version === 4 ? "ipv4" : "ipv6" };
  const probe = new BlockList();
  add(probe, range);
  if (probe.check("0.0.0.0", "ipv4") && probe.check("255.255.255.255", "ipv4")) {
    return { problem: `"${entry}" holds every IPv4 address, so anyone could choose the address they are scored by: list the proxies' own ranges (an IPv4 range in IPv4 form, 10.0.0.0/8)` };
  }
  return range;
}

function add(list: BlockList, range: TrustedRange): void {
  if (range.prefix === undefined) list.addAddress(range.address, range.family);
  else list.addSubnet(range.address, range.prefix, range.family);
}

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
      const range = parseTrustedRange(entry);
      if ("problem" in range) throw new Error(`FRAUD_TRUSTED_PROXIES: ${range.problem}`);
      add(this.trusted, range);
    }
    this.hasTrusted = trustedProxies.length > 0;
  }

  resolve(remoteAddress: string | undefined, forwardedFor: string | string[] | undefined): string {
    const peer = normalize(remoteAddress ?? "");
    if (!this.hasTrusted || !this.isTrusted(peer) || forwardedFor === undefined) return peer;
    const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(",") : forwardedFor).split(",");
    // Walk from the nearest hop back; the first untrusted address is the client. A hop that is no address
    // ("unknown", a proxy's obfuscated name) ends the walk: what lies beyond it was written by someone the
    // trusted proxies did not vouch for, so the client is taken to be the last trusted hop seen.
    let nearest = peer;
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hopAddress(hops[i] as string);
      if (hop === null || !this.isTrusted(hop)) return hop ?? nearest;
      nearest = hop;
    }
    return nearest;
  }

  private isTrusted(address: string): boolean {
    const family = isIP(address);
    return family !== 0 && this.trusted.check(address, family === 4 ? "ipv4" : "ipv6");
  }
}

/**
 * The address of one X-Forwarded-For hop, or null when it is none. Some proxies add the client's port:
 * "1.2.3.4:5678", "[2001:db8::1]:443".
 */
function hopAddress(hop: string): string | null {
  let text = hop.trim();
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(text);
  if (bracketed !== null) text = bracketed[1] as string;
  else if (/^[\d.]+:\d{1,5}$/.test(text)) text = text.slice(0, text.lastIndexOf(":"));
  const address = normalize(text);
  return isIP(address) === 0 ? null : address;
}

/** "::ffff:1.2.3.4" (IPv4 on a dual-stack socket) is reported as "1.2.3.4". */
function normalize(address: string): string {
  return address.startsWith("::ffff:") && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}
