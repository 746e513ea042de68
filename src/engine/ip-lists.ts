// Parsers for the operator-maintained IP lists: Tor exit nodes and hosting /
// datacenter ranges. Both are read through ReloadableFile so a refreshed file
// is picked up without a restart.

import { parseCidr, parseIp } from "./ip.js";
import type { ParsedIp } from "./ip.js";

/** Canonical address texts (see parseIp) of Tor exit relays. */
export type TorExitSet = ReadonlySet<string>;

/**
 * Accepts both formats the Tor Project publishes:
 * - the bulk exit list (https://check.torproject.org/torbulkexitlist): one address per line;
 * - the exit-addresses document: `ExitAddress <ip> <date> <time>` lines among
 *   ExitNode / Published / LastStatus lines, which are skipped.
 * `#` starts a comment; unparseable lines are ignored so a partly garbled
 * download still yields the good entries.
 */
export function parseTorExitList(text: string): TorExitSet {
  const addresses = new Set<string>();
  for (const rawLine of text.split("\n")) {
    const line = stripComment(rawLine);
    if (line === "") continue;
    const fields = line.split(/\s+/);
    const candidate = fields[0] === "ExitAddress" ? fields[1] : fields.length === 1 ? fields[0] : undefined;
    if (candidate === undefined) continue;
    const ip = parseIp(candidate);
    if (ip !== null) addresses.add(ip.text);
  }
  return addresses;
}

function stripComment(line: string): string {
  const hash = line.indexOf("#");
  return (hash === -1 ? line : line.slice(0, hash)).trim();
}

/**
 * A set of IPv4 and IPv6 ranges merged into disjoint sorted intervals, so a
 * lookup is one binary search. Sized for provider range lists (thousands of
 * CIDRs), not for the country database.
 */
export class IpRangeSet {
  private readonly v4Starts: Float64Array;
  private readonly v4Ends: Float64Array;
  private readonly v6Starts: bigint[];
  private readonly v6Ends: bigint[];

  private constructor(v4: [number, number][], v6: [bigint, bigint][]) {
    this.v4Starts = Float64Array.from(v4, ([first]) => first);
    this.v4Ends = Float64Array.from(v4, ([, last]) => last);
    this.v6Starts = v6.map(([first]) => first);
    this.v6Ends = v6.map(([, last]) => last);
  }

  static readonly EMPTY = new IpRangeSet([], []);

  /** One CIDR or bare address per line; `#` comments and blank lines ignored, invalid lines skipped. */
  static parse(text: string): IpRangeSet {
    const v4: [number, number][] = [];
    const v6: [bigint, bigint][] = [];
    for (const rawLine of text.split("\n")) {
      const line = stripComment(rawLine);
      if (line === "") continue;
      const range = parseCidr(line.split(/\s+/)[0] ?? "");
      if (range === null) continue;
      if (range.version === 4) v4.push([range.first, range.last]);
      else v6.push([range.first, range.last]);
    }
    return new IpRangeSet(
      mergeIntervals(v4, (value) => value + 1),
      mergeIntervals(v6, (value) => value + 1n),
    );
  }

  get size(): number {
    return this.v4Starts.length + this.v6Starts.length;
  }

  contains(ip: ParsedIp): boolean {
    if (ip.version === 4) {
      const index = lastAtOrBelow(this.v4Starts, ip.value);
      return index >= 0 && ip.value <= (this.v4Ends[index] ?? -1);
    }
    const index = lastAtOrBelow(this.v6Starts, ip.value);
    return index >= 0 && ip.value <= (this.v6Ends[index] ?? -1n);
  }
}

/** Sorts and merges overlapping or adjacent inclusive intervals. */
function mergeIntervals<T extends number | bigint>(intervals: [T, T][], successor: (value: T) => T): [T, T][] {
  const sorted = [...intervals].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const merged: [T, T][] = [];
  for (const [first, last] of sorted) {
    const previous = merged[merged.length - 1];
    if (previous !== undefined && first <= successor(previous[1])) {
      if (last > previous[1]) previous[1] = last;
    } else {
      merged.push([first, last]);
    }
  }
  return merged;
}

/** Index of the last element <= value in an ascending array, or -1. */
function lastAtOrBelow<T extends number | bigint>(sorted: ArrayLike<T>, value: T): number {
  let low = 0;
  let high = sorted.length - 1;
  let found = -1;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    if ((sorted[middle] as T) <= value) {
      found = middle;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}
