// IP → country lookup over the @ip-location-db geo-whois-asn-country CSVs.
//
// The CSV rows are inclusive ranges sorted by start, but they nest: a provider
// geofeed entry (more specific) sits inside the RIR whois block it belongs to.
// Loading flattens them once into a boundary table — each entry is the first
// address of a segment and the country of that whole segment (0 = unknown) —
// so a lookup is one binary search for the last boundary at or below the
// address, with no end array to check. IPv6 keeps all 128 bits (two uint64 per
// boundary) because several thousand rows are narrower than a /64.
//
// The tables live in SharedArrayBuffers: the main thread loads them once and
// worker threads receive them through workerData without copying.

import { readFileSync } from "node:fs";
import type { ParsedIp } from "./ip.js";

/** The typed arrays of a loaded table; structured-cloning it shares the memory. */
export interface SharedGeoCountryTable {
  readonly v4Starts: Uint32Array;
  readonly v4Countries: Uint16Array;
  /** Interleaved [high 64 bits, low 64 bits] of each IPv6 boundary. */
  readonly v6Starts: BigUint64Array;
  readonly v6Countries: Uint16Array;
}

const NO_COUNTRY = 0;
const IPV4_MAX = 0xffffffff;
const IPV6_MAX = (1n << 128n) - 1n;
const LOW_64_MASK = (1n << 64n) - 1n;

export class GeoCountryTable {
  private readonly tables: SharedGeoCountryTable;

  private constructor(tables: SharedGeoCountryTable) {
    this.tables = tables;
  }

  /** Loads the `-ipv4-num.csv` and `-ipv6-num.csv` files (decimal range bounds). */
  static loadFromCsvFiles(ipv4NumCsvPath: string, ipv6NumCsvPath: string): GeoCountryTable {
    const v4 = flattenRanges(readRows(ipv4NumCsvPath, Number), (value) => value + 1, IPV4_MAX);
    const v6 = flattenRanges(readRows(ipv6NumCsvPath, BigInt), (value) => value + 1n, IPV6_MAX);

    const v4Starts = new Uint32Array(new SharedArrayBuffer(v4.starts.length * 4));
    v4Starts.set(v4.starts);
    const v6Starts = new BigUint64Array(new SharedArrayBuffer(v6.starts.length * 16));
    v6.starts.forEach((start, index) => {
      v6Starts[index * 2] = start >> 64n;
      v6Starts[index * 2 + 1] = start & LOW_64_MASK;
    });
    return new GeoCountryTable({
      v4Starts,
      v4Countries: sharedUint16(v4.countries),
      v6Starts,
      v6Countries: sharedUint16(v6.countries),
    });
  }

  static fromShared(tables: SharedGeoCountryTable): GeoCountryTable {
    return new GeoCountryTable(tables);
  }

  toShared(): SharedGeoCountryTable {
    return this.tables;
  }

  get byteLength(): number {
    const { v4Starts, v4Countries, v6Starts, v6Countries } = this.tables;
    return v4Starts.byteLength + v4Countries.byteLength + v6Starts.byteLength + v6Countries.byteLength;
  }

  /** ISO 3166-1 alpha-2 code, or "" when the address is in no registered range. */
  lookup(ip: ParsedIp): string {
    const { v4Starts, v4Countries, v6Starts, v6Countries } = this.tables;
    const index = ip.version === 4 ? lastBoundaryV4(v4Starts, ip.value) : lastBoundaryV6(v6Starts, ip.value);
    if (index < 0) return "";
    const code = (ip.version === 4 ? v4Countries[index] : v6Countries[index]) ?? NO_COUNTRY;
    return code === NO_COUNTRY ? "" : String.fromCharCode(code >> 8, code & 0xff);
  }
}

function sharedUint16(values: readonly number[]): Uint16Array {
  const array = new Uint16Array(new SharedArrayBuffer(values.length * 2));
  array.set(values);
  return array;
}

function encodeCountry(code: string): number {
  // Two ASCII letters packed into 16 bits; never 0, which means "no country".
  return code.length === 2 ? (code.charCodeAt(0) << 8) | code.charCodeAt(1) : NO_COUNTRY;
}

type Row<T> = readonly [start: T, end: T, country: number];

function* readRows<T extends number | bigint>(path: string, parseNumber: (text: string) => T): Generator<Row<T>> {
  const text = readFileSync(path, "latin1");
  let lineStart = 0;
  while (lineStart < text.length) {
    let lineEnd = text.indexOf("\n", lineStart);
    if (lineEnd === -1) lineEnd = text.length;
    const firstComma = text.indexOf(",", lineStart);
    const secondComma = text.indexOf(",", firstComma + 1);
    if (firstComma !== -1 && secondComma !== -1 && secondComma < lineEnd) {
      yield [
        parseNumber(text.slice(lineStart, firstComma)),
        parseNumber(text.slice(firstComma + 1, secondComma)),
        encodeCountry(text.slice(secondComma + 1, lineEnd).trim()),
      ];
    }
    lineStart = lineEnd + 1;
  }
}

interface Boundaries<T> {
  readonly starts: T[];
  readonly countries: number[];
}

/**
 * Sweeps ranges sorted by start and emits segment boundaries. An open-range
 * stack keeps the enclosing ranges, so when a nested range ends the enclosing
 * country resumes. A later row overrides an earlier one on its whole span,
 * which gives the more specific row priority when the file lists the
 * enclosing block first (as this database does).
 */
function flattenRanges<T extends number | bigint>(
  rows: Iterable<Row<T>>,
  successor: (value: T) => T,
  maxAddress: T,
): Boundaries<T> {
  const starts: T[] = [];
  const countries: number[] = [];
  const emit = (position: T, country: number): void => {
    const last = starts.length - 1;
    if (last >= 0 && starts[last] === position) {
      countries[last] = country;
      if (last >= 1 && countries[last - 1] === country) {
        starts.pop();
        countries.pop();
      }
      return;
    }
    if (last >= 0 ? countries[last] === country : country === NO_COUNTRY) return;
    starts.push(position);
    countries.push(country);
  };

  const open: { end: T; country: number }[] = [];
  const closeUntil = (position: T | null): void => {
    for (let top = open.at(-1); top !== undefined && (position === null || top.end < position); top = open.at(-1)) {
      open.pop();
      if (top.end < maxAddress) emit(successor(top.end), open.at(-1)?.country ?? NO_COUNTRY);
    }
  };

  let previousStart: T | null = null;
  for (const [start, end, country] of rows) {
    if (previousStart !== null && start < previousStart) {
      throw new Error("geo country CSV is not sorted by range start");
    }
    previousStart = start;
    closeUntil(start);
    emit(start, country);
    for (let top = open.at(-1); top !== undefined && top.end <= end; top = open.at(-1)) open.pop();
    open.push({ end, country });
  }
  closeUntil(null);
  return { starts, countries };
}

function lastBoundaryV4(starts: Uint32Array, value: number): number {
  let low = 0;
  let high = starts.length - 1;
  let found = -1;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    if ((starts[middle] ?? 0) <= value) {
      found = middle;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}

function lastBoundaryV6(interleaved: BigUint64Array, value: bigint): number {
  const high64 = value >> 64n;
  const low64 = value & LOW_64_MASK;
  let low = 0;
  let high = interleaved.length / 2 - 1;
  let found = -1;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    const startHigh = interleaved[middle * 2] ?? 0n;
    const startLow = interleaved[middle * 2 + 1] ?? 0n;
    if (startHigh < high64 || (startHigh === high64 && startLow <= low64)) {
      found = middle;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}
