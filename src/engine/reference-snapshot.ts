// The big reference tables (country ranges, disposable domains), compiled once
// into a binary snapshot file and read back straight into SharedArrayBuffers.
//
// Building them parses 26 MB of CSV and 2.5 MB of JSON: half a second and
// about 100 MB of transient memory, which was the service's peak resident
// memory. A snapshot reads in a few milliseconds and allocates nothing but the
// tables. `npm ci` builds it (the `prepare` script); a service that finds none,
// or one built from other source files, builds the tables itself and writes it.
//
// File layout: a 4-byte little-endian length, a JSON header of that length
// (format version, the key of the sources, each section's name, element type
// and length), then each section's bytes at an 8-byte-aligned offset.

import { closeSync, mkdirSync, openSync, readSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { SharedDomainList } from "./domain-list.js";
import type { SharedGeoCountryTable } from "./geo-country.js";

/** The part of the reference data a snapshot holds: everything but the small, reloadable lists. */
export interface ReferenceTables {
  readonly geo: SharedGeoCountryTable;
  readonly disposableDomains: SharedDomainList;
  readonly disposableWildcardDomains: readonly string[];
}

/** Bumped whenever the tables' layout or the way they are built changes. */
const FORMAT_VERSION = 1;
const ALIGNMENT = 8;

const ARRAY_TYPES = {
  Uint8Array,
  Uint16Array,
  Uint32Array,
  BigUint64Array,
} as const;
type ArrayTypeName = keyof typeof ARRAY_TYPES;
type SnapshotArray = Uint8Array<ArrayBufferLike> | Uint16Array<ArrayBufferLike> | Uint32Array<ArrayBufferLike> | BigUint64Array<ArrayBufferLike>;

interface Section {
  name: string;
  type: ArrayTypeName;
  length: number;
}

interface Header {
  version: number;
  key: string;
  sections: Section[];
  disposableWildcardDomains: string[];
}

/**
 * What the snapshot was built from: each source file's path, size and
 * modification time. Another version of a data package changes it.
 */
export function snapshotKey(sourcePaths: readonly string[]): string {
  return sourcePaths
    .map((path) => {
      const stat = statSync(path);
      return `${path}:${stat.size}:${Math.trunc(stat.mtimeMs)}`;
    })
    .join("|");
}

/** Path of the snapshot file in a cache directory. */
export function snapshotPath(cacheDir: string): string {
  return join(cacheDir, `reference-tables-v${FORMAT_VERSION}.bin`);
}

function sectionsOf(tables: ReferenceTables): Array<[string, SnapshotArray]> {
  return [
    ["geo.v4Starts", tables.geo.v4Starts],
    ["geo.v4Countries", tables.geo.v4Countries],
    ["geo.v6Starts", tables.geo.v6Starts],
    ["geo.v6Countries", tables.geo.v6Countries],
    ["disposableDomains.bytes", tables.disposableDomains.bytes],
    ["disposableDomains.offsets", tables.disposableDomains.offsets],
  ];
}

const aligned = (offset: number) => Math.ceil(offset / ALIGNMENT) * ALIGNMENT;

/** Writes the snapshot atomically (a temporary file renamed over the old one). */
export function writeReferenceSnapshot(path: string, key: string, tables: ReferenceTables): void {
  const sections = sectionsOf(tables);
  const header: Header = {
    version: FORMAT_VERSION,
    key,
    sections: sections.map(([name, array]) => ({ name, type: array.constructor.name as ArrayTypeName, length: array.length })),
    disposableWildcardDomains: [...tables.disposableWildcardDomains],
  };
  const headerBytes = Buffer.from(JSON.stringify(header), "utf8");
  let offset = aligned(4 + headerBytes.length);
  const total = sections.reduce((end, [, array]) => aligned(end) + array.byteLength, offset);
  const file = Buffer.alloc(total);
  file.writeUInt32LE(headerBytes.length, 0);
  headerBytes.copy(file, 4);
  for (const [, array] of sections) {
    offset = aligned(offset);
    file.set(new Uint8Array(array.buffer, array.byteOffset, array.byteLength), offset);
    offset += array.byteLength;
  }
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, file);
  renameSync(temporary, path);
}

/**
 * Reads a snapshot built from the sources `key` describes into
 * SharedArrayBuffers; undefined when there is none, it is of another format
 * or other sources, or it is damaged.
 */
export function readReferenceSnapshot(path: string, key: string): ReferenceTables | undefined {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return undefined;
  }
  try {
    const size = statSync(path).size;
    const lengthBytes = Buffer.alloc(4);
    if (size < 4 || readSync(fd, lengthBytes, 0, 4, 0) !== 4) return undefined;
    const headerLength = lengthBytes.readUInt32LE(0);
    if (4 + headerLength > size) return undefined;
    const headerBytes = Buffer.alloc(headerLength);
    if (readSync(fd, headerBytes, 0, headerLength, 4) !== headerLength) return undefined;
    const header = parseHeader(headerBytes.toString("utf8"));
    if (!header || header.version !== FORMAT_VERSION || header.key !== key) return undefined;

    const arrays = new Map<string, SnapshotArray>();
    let offset = aligned(4 + headerLength);
    for (const section of header.sections) {
      const array = sharedArray(section.type, section.length);
      const view = new Uint8Array(array.buffer);
      offset = aligned(offset);
      if (offset + view.byteLength > size || readSync(fd, view, 0, view.byteLength, offset) !== view.byteLength) return undefined;
      offset += view.byteLength;
      arrays.set(section.name, array);
    }
    const section = <T extends SnapshotArray>(name: string, Type: abstract new (...args: never[]) => T): T => {
      const array = arrays.get(name);
      if (!(array instanceof Type)) throw new SnapshotDamaged(name);
      return array;
    };
    return {
      geo: {
        v4Starts: section("geo.v4Starts", Uint32Array),
        v4Countries: section("geo.v4Countries", Uint16Array),
        v6Starts: section("geo.v6Starts", BigUint64Array),
        v6Countries: section("geo.v6Countries", Uint16Array),
      },
      disposableDomains: {
        bytes: section("disposableDomains.bytes", Uint8Array),
        offsets: section("disposableDomains.offsets", Uint32Array),
      },
      disposableWildcardDomains: header.disposableWildcardDomains,
    };
  } catch (error) {
    if (error instanceof SnapshotDamaged) return undefined;
    throw error;
  } finally {
    closeSync(fd);
  }
}

class SnapshotDamaged extends Error {}

function sharedArray(type: ArrayTypeName, length: number): SnapshotArray {
  const buffer = new SharedArrayBuffer(length * ARRAY_TYPES[type].BYTES_PER_ELEMENT);
  switch (type) {
    case "Uint8Array":
      return new Uint8Array(buffer);
    case "Uint16Array":
      return new Uint16Array(buffer);
    case "Uint32Array":
      return new Uint32Array(buffer);
    case "BigUint64Array":
      return new BigUint64Array(buffer);
  }
}

function parseHeader(text: string): Header | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const header = parsed as Partial<Header>;
  const validSections =
    Array.isArray(header.sections) &&
    header.sections.every(
      (s: Partial<Section>) => typeof s.name === "string" && typeof s.type === "string" && s.type in ARRAY_TYPES && Number.isSafeInteger(s.length) && (s.length ?? -1) >= 0,
    );
  const validWildcards = Array.isArray(header.disposableWildcardDomains) && header.disposableWildcardDomains.every((d) => typeof d === "string");
  if (typeof header.version !== "number" || typeof header.key !== "string" || !validSections || !validWildcards) return undefined;
  return header as Header;
}
