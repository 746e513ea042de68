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

  /**
   * Loads the `-ipv4-num.csv` and `-ipv6-num.csv` files (decimal range bounds).
   * The files are 26 MB of text and 600,000 rows: they are read as bytes and
   * flattened straight into typed arrays, so loading allocates little beyond
   * the tables (about 7 MB) and leaves no heap of row objects behind.
   */
  static loadFromCsvFiles(ipv4NumCsvPath: string, ipv6NumCsvPath: string): GeoCountryTable {
    const v4Csv = readFileSync(ipv4NumCsvPath);
    const v4 = new V4Boundaries(lineCount(v4Csv));
    flattenRanges(csvRows(v4Csv, decimalNumber), v4, (value) => value + 1, IPV4_MAX);
    const v6Csv = readFileSync(ipv6NumCsvPath);
    const v6 = new V6Boundaries(lineCount(v6Csv));
    flattenRanges(csvRows(v6Csv, decimalBigInt), v6, (value) => value + 1n, IPV6_MAX);
    return new GeoCountryTable({
      v4Starts: sharedCopy(v4.starts.subarray(0, v4.count), Uint32Array),
      v4Countries: sharedCopy(v4.countries.subarray(0, v4.count), Uint16Array),
      v6Starts: sharedCopy(v6.starts.subarray(0, v6.count * 2), BigUint64Array),
      v6Countries: sharedCopy(v6.countries.subarray(0, v6.count), Uint16Array),
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

type TypedArrayOf<T> = { length: number; set(source: T): void };

function sharedCopy<T extends { length: number; BYTES_PER_ELEMENT: number }, C extends TypedArrayOf<T>>(
  source: T,
  Type: new (buffer: SharedArrayBuffer) => C,
): C {
  const copy = new Type(new SharedArrayBuffer(source.length * source.BYTES_PER_ELEMENT));
  copy.set(source);
  return copy;
}

function encodeCountry(csv: Buffer, start: number, end: number): number {
  // Two ASCII letters packed into 16 bits; never 0, which means "no country".
  while (end > start && (csv[end - 1] === CR || csv[end - 1] === SPACE)) end--;
  return end - start === 2 ? ((csv[start] as number) << 8) | (csv[start + 1] as number) : NO_COUNTRY;
}

const NEWLINE = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const COMMA = 0x2c;
const ZERO = 0x30;

function lineCount(csv: Buffer): number {
  let lines = 1;
  for (let at = csv.indexOf(NEWLINE); at !== -1; at = csv.indexOf(NEWLINE, at + 1)) lines++;
  return lines;
}

/** IPv4 bounds fit a double exactly: digits are summed without making a string. */
function decimalNumber(csv: Buffer, start: number, end: number): number {
  let value = 0;
  for (let at = start; at < end; at++) value = value * 10 + ((csv[at] as number) - ZERO);
  return value;
}

function decimalBigInt(csv: Buffer, start: number, end: number): bigint {
  return BigInt(csv.toString("latin1", start, end));
}

type Row<T> = readonly [start: T, end: T, country: number];

/** The rows of a `start,end,country` CSV, parsed from its bytes. */
function* csvRows<T extends number | bigint>(csv: Buffer, parse: (csv: Buffer, start: number, end: number) => T): Generator<Row<T>> {
  let lineStart = 0;
  while (lineStart < csv.length) {
    let lineEnd = csv.indexOf(NEWLINE, lineStart);
    if (lineEnd === -1) lineEnd = csv.length;
    const firstComma = csv.indexOf(COMMA, lineStart);
    const secondComma = firstComma === -1 ? -1 : csv.indexOf(COMMA, firstComma + 1);
    if (firstComma !== -1 && secondComma !== -1 && secondComma < lineEnd) {
      yield [parse(csv, lineStart, firstComma), parse(csv, firstComma + 1, secondComma), encodeCountry(csv, secondComma + 1, lineEnd)];
    }
    lineStart = lineEnd + 1;
  }
}

/** Where {@link flattenRanges} writes its boundaries: a stack of (first address, country). */
interface BoundarySink<T> {
  readonly count: number;
  startAt(index: number): T;
  countryAt(index: number): number;
  setCountry(index: number, country: number): void;
  push(start: T, country: number): void;
  pop(): void;
}

/** A range's rows make at most two boundaries each (its start, and its end's successor), plus one. */
class V4Boundaries implements BoundarySink<number> {
  readonly starts: Uint32Array;
  readonly countries: Uint16Array;
  count = 0;

  constructor(rows: number) {
    this.starts = new Uint32Array(rows * 2 + 1);
    this.countries = new Uint16Array(rows * 2 + 1);
  }

  startAt(index: number): number {
    return this.starts[index] as number;
  }

  countryAt(index: number): number {
    return this.countries[index] as number;
  }

  setCountry(index: number, country: number): void {
    this.countries[index] = country;
  }

  push(start: number, country: number): void {
    this.starts[this.count] = start;
    this.countries[this.count++] = country;
  }

  pop(): void {
    this.count--;
  }
}

class V6Boundaries implements BoundarySink<bigint> {
  /** Interleaved [high 64 bits, low 64 bits]. */
  readonly starts: BigUint64Array;
  readonly countries: Uint16Array;
  count = 0;

  constructor(rows: number) {
    this.starts = new BigUint64Array((rows * 2 + 1) * 2);
    this.countries = new Uint16Array(rows * 2 + 1);
  }

  startAt(index: number): bigint {
    return ((this.starts[index * 2] as bigint) << 64n) | (this.starts[index * 2 + 1] as bigint);
  }

  countryAt(index: number): number {
    return this.countries[index] as number;
  }

  setCountry(index: number, country: number): void {
    this.countries[index] = country;
  }

  push(start: bigint, country: number): void {
    this.starts[this.count * 2] = start >> 64n;
    this.starts[this.count * 2 + 1] = start & LOW_64_MASK;
    this.countries[this.count++] = country;
  }

  pop(): void {
    this.count--;
  }
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
  out: BoundarySink<T>,
  successor: (value: T) => T,
  maxAddress: T,
): void {
  const emit = (position: T, country: number): void => {
    const last = out.count - 1;
    if (last >= 0 && out.startAt(last) === position) {
      out.setCountry(last, country);
      if (last >= 1 && out.countryAt(last - 1) === country) out.pop();
      return;
    }
    if (last >= 0 ? out.countryAt(last) === country : country === NO_COUNTRY) return;
    out.push(position, country);
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
