// Named allow/deny lists that rules test with `value in lists.<name>`.
//
// The caller (the list store) builds a ListSnapshot from the entries that are
// live now, dropping expired ones, and swaps in a new snapshot when entries
// change; a snapshot never changes, so one decision sees one consistent set.
//
// Lookups are a hash probe (user, email, device and exact IP entries) plus,
// for IP lists with CIDR ranges, one binary search over merged intervals, so
// they cost the same at 100,000 entries as at ten.

import { celMap } from "@bufbuild/cel";
import type { CelMap } from "@bufbuild/cel";
import { IpRangeSet } from "../engine/ip-lists.js";
import { canonicalCidr, nat64Client, parseIp } from "../engine/ip.js";
import { canonicalEmail } from "../engine/signals/email.js";

export type ListKind = "user" | "email" | "ip" | "device";

/** One list as stored: IP lists hold addresses and CIDR ranges, IPv4 or IPv6. */
export interface ListDefinition {
  readonly name: string;
  readonly kind: ListKind;
  readonly entries: Iterable<string>;
}

/** Membership test of one list; the value is whatever the rule put left of `in`. */
export interface ListMatcher {
  readonly kind: ListKind;
  has(value: string): boolean;
}

/** Lists one account and environment may hold. */
export const MAX_LISTS = 100;
/**
 * Live entries one list may hold, automatic lists included: the account's
 * lists are rebuilt on the request thread after each change (100,000 entries
 * take about 0.1 s).
 */
export const MAX_LIST_ENTRIES = 100_000;

/** Names must be CEL identifiers so `lists.<name>` parses. */
const LIST_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/**
 * Identifiers a rule cannot write after `lists.`: CEL's reserved words and
 * literals, and the specification's AND, OR and NOT, which conditions turn
 * into operators (keywords.ts). A list with such a name could never be used.
 */
const UNUSABLE_NAMES: ReadonlySet<string> = new Set([
  "as", "break", "const", "continue", "else", "false", "for", "function", "if", "import", "in", "let", "loop",
  "package", "namespace", "null", "return", "true", "var", "void", "while", "AND", "OR", "NOT",
]);

/** Whether `name` is a list name at all (lists saved before the reserved words were refused included). */
export function isValidListName(name: string): boolean {
  return LIST_NAME.test(name);
}

/** Whether a new list may take `name`: a list name a rule can also write after `lists.`. */
export function isUsableNewListName(name: string): boolean {
  return LIST_NAME.test(name) && !UNUSABLE_NAMES.has(name);
}

/**
 * The stored form of an entry, or null when it is not valid for the kind.
 * E-mails compare case-insensitively (lower-cased, surrounding spaces
 * ignored); IP entries are canonical addresses or CIDR ranges, so
 * `::ffff:10.0.0.1`, `10.0.0.1/32` and `10.0.0.1` are one entry, and so are
 * `64:ff9b::10.0.0.1` and `10.0.0.1` (a NAT64 address is its IPv4 client,
 * as in the signals; a range over the NAT64 prefix stays as written). User and
 * device ids are kept exactly as given, as decide compares them. Use it when
 * entries are saved, so a snapshot never meets a bad entry.
 */
export function normalizeListEntry(kind: ListKind, entry: string): string | null {
  switch (kind) {
    case "email": {
      const trimmed = entry.trim();
      return trimmed === "" ? null : canonicalEmail(trimmed);
    }
    case "ip": {
      const trimmed = entry.trim();
      if (!trimmed.includes("/")) return listedAddress(trimmed);
      const range = canonicalCidr(trimmed);
      if (range === null) return null;
      const address = addressOfHostRange(range);
      return address === range ? range : listedAddress(address);
    }
    default:
      // Decide refuses a blank user id, so a blank entry could never match.
      return entry.trim() === "" ? null : entry;
  }
}

/**
 * A request's e-mail or IP address in the form lists of that kind compare it, which is also the form rules
 * read `email` and `ip` in (evaluate.ts, live and in backtests alike), so that `email.endsWith(...)` and
 * `ip == '...'` agree with `in lists.<name>`. An e-mail is {@link canonicalEmail}'s: trimmed, lower-cased
 * whole (lists compare case-insensitively, so a rule cannot tell `Bob@` from `bob@` either), its domain in
 * one spelling. An address is canonical (lower-case hexadecimal, zeros compressed, an IPv4-mapped address
 * as its IPv4 address), as `signals.network.ip` shows it: a NAT64 address stays itself, so a range over the
 * NAT64 prefix still matches it (IpMatcher also tries its client). Text that is no address stays as given.
 */
export function comparedForm(kind: "email" | "ip", value: string): string {
  return kind === "email" ? canonicalEmail(value) : (parseIp(value)?.text ?? value);
}

/** An address as lists hold it: canonical, and a NAT64 address as the IPv4 client it carries. */
function listedAddress(text: string): string | null {
  const ip = parseIp(text);
  return ip === null ? null : (nat64Client(ip) ?? ip).text;
}

/** A canonical range of one address (`/32`, `/128`) is that address: else it would be a second entry for it. */
function addressOfHostRange(range: string): string {
  const slash = range.lastIndexOf("/");
  const hostBits = range.includes(":") ? "128" : "32";
  return range.slice(slash + 1) === hostBits ? range.slice(0, slash) : range;
}

class ExactMatcher implements ListMatcher {
  constructor(
    readonly kind: ListKind,
    private readonly values: ReadonlySet<string>,
  ) {}

  has(value: string): boolean {
    if (this.kind !== "email") return this.values.has(value);
    // No entry is longer (320 characters, each at most two UTF-16 units): a longer text is none, and
    // lowercasing it is what a rule that looks up long texts would spend its time on.
    return value.length <= MAX_EMAIL_LOOKUP && this.values.has(comparedForm("email", value));
  }
}

/** The longest text an e-mail list looks up, in UTF-16 units: what the 320 characters of an entry can take. */
const MAX_EMAIL_LOOKUP = 2 * 320;

class IpMatcher implements ListMatcher {
  readonly kind = "ip";

  constructor(
    private readonly addresses: ReadonlySet<string>,
    private readonly ranges: IpRangeSet,
  ) {}

  has(value: string): boolean {
    const ip = parseIp(value);
    if (ip === null) return false;
    if (this.addresses.has(ip.text) || this.ranges.contains(ip)) return true;
    // A NAT64 address is its IPv4 client (docs/signals.md): the client's entries match it (entries are
    // stored in the client's spelling: normalizeListEntry).
    const client = nat64Client(ip);
    return client !== undefined && (this.addresses.has(client.text) || this.ranges.contains(client));
  }
}

function buildMatcher(definition: ListDefinition): ListMatcher {
  const values = new Set<string>();
  const cidrs: string[] = [];
  for (const entry of definition.entries) {
    const normalized = normalizeListEntry(definition.kind, entry);
    if (normalized === null) {
      throw new Error(`list '${definition.name}': invalid ${definition.kind} entry '${entry}'`);
    }
    if (definition.kind === "ip" && normalized.includes("/")) cidrs.push(normalized);
    else values.add(normalized);
  }
  if (definition.kind !== "ip") return new ExactMatcher(definition.kind, values);
  // IpRangeSet merges overlapping ranges into sorted intervals for a binary search.
  return new IpMatcher(values, cidrs.length === 0 ? IpRangeSet.EMPTY : IpRangeSet.parse(cidrs.join("\n")));
}

/**
 * A map that answers membership through a matcher. @bufbuild/cel evaluates
 * `x in m` on a map as a key lookup, so binding each list as such a map keeps
 * the documented `ip in lists.blocked_ips` form working with CIDR ranges
 * without a linear scan. Enumeration is never needed: the checker allows
 * `lists.<name>` only on the right of `in`.
 */
class MembershipMap extends Map<string, boolean> {
  constructor(private readonly matcher: ListMatcher) {
    super();
  }

  override get(key: string): boolean | undefined {
    return this.has(key) ? true : undefined;
  }

  override has(key: string): boolean {
    return typeof key === "string" && this.matcher.has(key);
  }
}

/** The lists visible to one evaluation, by name. */
export class ListSnapshot {
  static readonly EMPTY = new ListSnapshot(new Map());

  /** The `lists` variable as CEL sees it, built once per snapshot rather than per decision. */
  readonly celValue: CelMap;

  constructor(private readonly matchers: ReadonlyMap<string, ListMatcher>) {
    this.celValue = celMap(new Map([...matchers].map(([name, matcher]) => [name, celMap(new MembershipMap(matcher))])));
  }

  /** Builds matchers from stored entries; throws on a bad name, a duplicate name or an invalid entry. */
  static build(definitions: Iterable<ListDefinition>): ListSnapshot {
    const matchers = new Map<string, ListMatcher>();
    for (const definition of definitions) {
      if (!isValidListName(definition.name)) throw new Error(`invalid list name '${definition.name}'`);
      if (matchers.has(definition.name)) throw new Error(`duplicate list name '${definition.name}'`);
      matchers.set(definition.name, buildMatcher(definition));
    }
    return new ListSnapshot(matchers);
  }

  has(name: string): boolean {
    return this.matchers.has(name);
  }

  /** `value in lists.<name>` outside CEL; false for a list that does not exist. */
  contains(name: string, value: string): boolean {
    return this.matchers.get(name)?.has(value) ?? false;
  }
}
