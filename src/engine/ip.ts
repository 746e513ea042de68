// IP address parsing and classification of special-purpose ranges.
//
// Addresses are parsed once into numbers (IPv4, fits a uint32) or bigints
// (IPv6, 128 bits) so range tables can binary-search them. IPv4-mapped IPv6
// addresses (::ffff:a.b.c.d) are treated as the IPv4 address they carry,
// because that is what dual-stack servers report for IPv4 clients. An address
// of the NAT64 well-known prefix (64:ff9b::a.b.c.d, RFC 6052), the form IPv4
// clients take in front of an IPv6-only data centre (SIIT-DC), stays IPv6 (a
// list range written with that prefix means what it says) but is judged as
// the IPv4 client it carries: {@link nat64Client}.

import { isIP } from "node:net";

export type ParsedIp =
  | { readonly version: 4; readonly value: number; readonly text: string }
  | { readonly version: 6; readonly value: bigint; readonly text: string };

/** Special-purpose range an address falls in; "public" for ordinary unicast. */
export type IpRangeType =
  | "public"
  | "private"
  | "cgnat"
  | "loopback"
  | "linkLocal"
  | "uniqueLocal"
  | "documentation"
  | "multicast"
  | "unspecified"
  | "reserved";

/** Range types reachable only inside a network or host: a client behind them is not really identified. */
const PRIVATE_RANGE_TYPES: ReadonlySet<IpRangeType> = new Set([
  "private",
  "cgnat",
  "loopback",
  "linkLocal",
  "uniqueLocal",
]);

/** Range types that should never be the source of a real client request. */
const RESERVED_RANGE_TYPES: ReadonlySet<IpRangeType> = new Set([
  "documentation",
  "multicast",
  "unspecified",
  "reserved",
]);

export function isPrivateRangeType(rangeType: IpRangeType): boolean {
  return PRIVATE_RANGE_TYPES.has(rangeType);
}

export function isReservedRangeType(rangeType: IpRangeType): boolean {
  return RESERVED_RANGE_TYPES.has(rangeType);
}

/**
 * The canonical text of a public address; "" for anything else. Only a public
 * address can join decisions together (velocity counters, the fraud graph,
 * automatic deny lists, consortium indicators): a private, CGNAT, loopback,
 * link-local or reserved one names no one's network. It is what a backend's
 * own address looks like when a decide leaves `ip` out, and joining on it
 * would tie every user behind that backend together.
 */
export function publicIpText(input: string): string {
  return publicIp(input)?.text ?? "";
}

/** `input` parsed, when it is a public address; null for any other text. */
function publicIp(input: string): ParsedIp | null {
  const ip = input === "" ? null : parseIp(input);
  return ip !== null && classifyIp(ip) === "public" ? ip : null;
}

/** The bits above an embedded IPv4 address's 32. */
const ABOVE_IPV4_MASK = ~0xffffffffn & ((1n << 128n) - 1n);
const IPV4_MAPPED_PREFIX = 0xffffn << 32n;
const NAT64_PREFIX = 0x64ff9bn << 96n;

/**
 * Parses an IPv4 or IPv6 address (an IPv6 zone id such as %eth0 is ignored); null when invalid. Only IPv6
 * has zones (RFC 4007), and one is never empty: `10.0.0.1%eth0` and `fe80::1%` are no addresses.
 */
export function parseIp(input: string): ParsedIp | null {
  const trimmed = input.trim();
  const zoneIndex = trimmed.indexOf("%");
  const address = zoneIndex === -1 ? trimmed : trimmed.slice(0, zoneIndex);
  if (zoneIndex !== -1 && (zoneIndex === trimmed.length - 1 || isIP(address) !== 6)) return null;
  const version = isIP(address);
  if (version === 4) return ipv4(parseIpv4(address));
  if (version === 6) {
    const value = parseIpv6(address);
    if ((value & ABOVE_IPV4_MASK) === IPV4_MAPPED_PREFIX) return ipv4(Number(value & 0xffffffffn));
    return { version: 6, value, text: formatIpv6(value) };
  }
  return null;
}

/**
 * The IPv4 client an address of the NAT64 well-known prefix (64:ff9b::/96)
 * stands for; undefined for any other address. What the address says of its
 * client (its range type, Tor exit, hosting range, country) is the IPv4
 * address's.
 */
export function nat64Client(ip: ParsedIp): ParsedIp | undefined {
  if (ip.version !== 6 || (ip.value & ABOVE_IPV4_MASK) !== NAT64_PREFIX) return undefined;
  return ipv4(Number(ip.value & 0xffffffffn));
}

function ipv4(value: number): ParsedIp {
  return { version: 4, value, text: formatIpv4(value) };
}

/** Parses a dotted-quad already validated by net.isIP. */
function parseIpv4(address: string): number {
  let value = 0;
  for (const part of address.split(".")) value = value * 256 + Number(part);
  return value;
}

/** Parses an IPv6 address already validated by net.isIP, including :: and a trailing dotted IPv4. */
function parseIpv6(address: string): bigint {
  let text = address;
  const groups: number[] = [];
  const lastColon = text.lastIndexOf(":");
  const tail = text.slice(lastColon + 1);
  let embeddedV4: number | null = null;
  if (tail.includes(".")) {
    embeddedV4 = parseIpv4(tail);
    text = text.slice(0, lastColon + 1) + "0:0";
  }
  const [head = "", rest] = text.split("::");
  const headGroups = head === "" ? [] : head.split(":");
  const restGroups = rest === undefined || rest === "" ? [] : rest.split(":");
  const missing = rest === undefined ? 0 : 8 - headGroups.length - restGroups.length;
  for (const group of headGroups) groups.push(parseInt(group, 16));
  for (let i = 0; i < missing; i++) groups.push(0);
  for (const group of restGroups) groups.push(parseInt(group, 16));
  let value = 0n;
  for (const group of groups) value = (value << 16n) | BigInt(group);
  if (embeddedV4 !== null) value = (value & ~0xffffffffn) | BigInt(embeddedV4);
  return value;
}

function formatIpv4(value: number): string {
  return `${(value >>> 24) & 255}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.${value & 255}`;
}

/** RFC 5952 canonical text: lowercase, no leading zeros, longest zero run compressed. */
function formatIpv6(value: bigint): string {
  const groups: number[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(Number((value >> shift) & 0xffffn));
  let bestStart = -1;
  let bestLength = 1; // a single zero group is not compressed (RFC 5952 4.2.2)
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((group) => group.toString(16));
  if (bestStart === -1) return hex.join(":");
  const head = hex.slice(0, bestStart).join(":");
  const tail = hex.slice(bestStart + bestLength).join(":");
  return `${head}::${tail}`;
}

interface SpecialRange<T extends number | bigint> {
  readonly first: T;
  readonly last: T;
  readonly rangeType: IpRangeType;
}

function v4Range(cidr: string, rangeType: IpRangeType): SpecialRange<number> {
  const [address = "", bits = "32"] = cidr.split("/");
  const first = parseIpv4(address);
  const size = 2 ** (32 - Number(bits));
  return { first, last: first + size - 1, rangeType };
}

function v6Range(cidr: string, rangeType: IpRangeType): SpecialRange<bigint> {
  const [address = "", bits = "128"] = cidr.split("/");
  const first = parseIpv6(address);
  const size = 1n << BigInt(128 - Number(bits));
  return { first, last: first + size - 1n, rangeType };
}

// IANA IPv4 Special-Purpose Address Registry (RFC 6890 and updates).
const IPV4_SPECIAL_RANGES: readonly SpecialRange<number>[] = [
  v4Range("0.0.0.0/8", "unspecified"),
  v4Range("10.0.0.0/8", "private"),
  v4Range("100.64.0.0/10", "cgnat"),
  v4Range("127.0.0.0/8", "loopback"),
  v4Range("169.254.0.0/16", "linkLocal"),
  v4Range("172.16.0.0/12", "private"),
  v4Range("192.0.0.0/24", "reserved"),
  v4Range("192.0.2.0/24", "documentation"),
  v4Range("192.168.0.0/16", "private"),
  v4Range("198.18.0.0/15", "reserved"), // benchmarking, RFC 2544
  v4Range("198.51.100.0/24", "documentation"),
  v4Range("203.0.113.0/24", "documentation"),
  v4Range("224.0.0.0/4", "multicast"),
  v4Range("240.0.0.0/4", "reserved"), // includes 255.255.255.255 broadcast
];

// IANA IPv6 Special-Purpose Address Registry (RFC 6890, RFC 9637 for 3fff::/20).
const IPV6_SPECIAL_RANGES: readonly SpecialRange<bigint>[] = [
  v6Range("::/128", "unspecified"),
  v6Range("::1/128", "loopback"),
  v6Range("100::/64", "reserved"), // discard-only
  v6Range("2001:2::/48", "reserved"), // benchmarking
  v6Range("2001:10::/28", "reserved"), // ORCHID
  v6Range("2001:20::/28", "reserved"), // ORCHIDv2
  v6Range("2001:db8::/32", "documentation"),
  v6Range("3fff::/20", "documentation"),
  v6Range("fc00::/7", "uniqueLocal"),
  v6Range("fe80::/10", "linkLocal"),
  v6Range("fec0::/10", "reserved"), // deprecated site-local
  v6Range("ff00::/8", "multicast"),
];

const IPV6_GLOBAL_UNICAST = v6Range("2000::/3", "public");
/** 6to4 (RFC 3056): 2002:a.b.c.d::/48 is the site behind IPv4 address a.b.c.d. */
const SIX_TO_FOUR = v6Range("2002::/16", "public");

export function classifyIp(ip: ParsedIp): IpRangeType {
  if (ip.version === 4) {
    for (const range of IPV4_SPECIAL_RANGES) {
      if (ip.value >= range.first && ip.value <= range.last) return range.rangeType;
    }
    return "public";
  }
  const client = nat64Client(ip);
  if (client !== undefined) return classifyIp(client);
  for (const range of IPV6_SPECIAL_RANGES) {
    if (ip.value >= range.first && ip.value <= range.last) return range.rangeType;
  }
  // A 6to4 site is no more public than the IPv4 address it is reached through (2002:a00:1:: is 10.0.0.1's).
  if (ip.value >= SIX_TO_FOUR.first && ip.value <= SIX_TO_FOUR.last) {
    return classifyIp(ipv4(Number((ip.value >> 80n) & 0xffffffffn)));
  }
  // Everything outside 2000::/3 that is not listed above is unassigned by IANA.
  const inGlobalUnicast = ip.value >= IPV6_GLOBAL_UNICAST.first && ip.value <= IPV6_GLOBAL_UNICAST.last;
  return inGlobalUnicast ? "public" : "reserved";
}

/**
 * The network one client holds at a time: its IPv4 address, or the /64 of its IPv6 address (a household's or
 * a phone's prefix, which outlives the daily rotation of the address inside it; every IPv6 host can use any
 * address of its /64). The text as given when it is no address.
 */
export function clientNetwork(ip: string): string {
  const parsed = parseIp(ip);
  return parsed === null ? ip : networkOf(parsed);
}

/**
 * The {@link clientNetwork} of a public address, "" for any other: what
 * decisions are joined by (velocity counters, distinct users, the fraud
 * graph), so that a client cannot start a fresh count by moving to another
 * address of its /64.
 */
export function publicClientNetwork(input: string): string {
  const ip = publicIp(input);
  return ip === null ? "" : networkOf(ip);
}

const LOW_64_BITS = (1n << 64n) - 1n;

function networkOf(ip: ParsedIp): string {
  if (ip.version === 4) return ip.text;
  // A NAT64 address is its IPv4 client's: one client whichever way it reaches the service (its /64 would
  // hold every IPv4 client behind the translator).
  const client = nat64Client(ip);
  return client !== undefined ? client.text : `${formatIpv6(ip.value & ~LOW_64_BITS)}/64`;
}

/**
 * A CIDR range written one way only: its first address in canonical form and
 * its prefix length, an IPv4-mapped IPv6 range as the IPv4 range it covers
 * (`10.1.2.3/16`, `10.1.0.0/16` and `::ffff:10.1.0.0/112` are all `10.1.0.0/16`).
 * Null when it does not parse.
 */
export function canonicalCidr(text: string): string | null {
  const range = parseCidr(text);
  if (range === null) return null;
  if (range.version === 4) return `${formatIpv4(range.first)}/${32 - Math.log2(range.last - range.first + 1)}`;
  const hostBits = (range.last - range.first + 1n).toString(2).length - 1;
  return `${formatIpv6(range.first)}/${128 - hostBits}`;
}

/** Parses "a.b.c.d/n", "x::/n" or a bare address (a host route) into an inclusive range. */
export function parseCidr(
  text: string,
): { version: 4; first: number; last: number } | { version: 6; first: bigint; last: bigint } | null {
  const slash = text.indexOf("/");
  const address = slash === -1 ? text : text.slice(0, slash);
  const ip = parseIp(address);
  if (ip === null) return null;
  const maxBits = ip.version === 4 ? 32 : 128;
  const bitsText = slash === -1 ? String(maxBits) : text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bitsText)) return null;
  // An IPv4-mapped IPv6 CIDR (::ffff:a.b.c.d/120) counts its prefix over 128 bits.
  const mappedOffset = ip.version === 4 && address.includes(":") ? 96 : 0;
  const bits = Number(bitsText) - mappedOffset;
  if (bits < 0 || bits > maxBits) return null;
  if (ip.version === 4) {
    const size = 2 ** (32 - bits);
    const first = ip.value - (ip.value % size);
    return { version: 4, first, last: first + size - 1 };
  }
  const hostBits = BigInt(128 - bits);
  const first = (ip.value >> hostBits) << hostBits;
  return { version: 6, first, last: first + (1n << hostBits) - 1n };
}
