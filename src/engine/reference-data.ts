// Everything the fast path looks up in memory: IP → country, Tor exits,
// datacenter ranges and disposable e-mail domains.
//
// Building the large tables (country ranges, disposable domains) parses ~28 MB
// of CSV and JSON, so they are compiled once into a snapshot file
// (reference-snapshot.ts) that later starts read back in milliseconds. They
// live in SharedArrayBuffers: toShared() returns a structured-cloneable object to pass
// as workerData, and fromShared() rebuilds a ReferenceData over the same
// memory in the worker. The Tor and datacenter lists are small and change
// while the service runs, so each thread reads them from their configured
// paths and reloads them on its own (reloadIfChanged / watch).

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { DomainList } from "./domain-list.js";
import type { SharedDomainList } from "./domain-list.js";
import { GeoCountryTable } from "./geo-country.js";
import type { SharedGeoCountryTable } from "./geo-country.js";
import { IpRangeSet, parseTorExitList } from "./ip-lists.js";
import type { TorExitSet } from "./ip-lists.js";
import { ReloadableFile } from "./reloadable-file.js";
import { readReferenceSnapshot, snapshotKey, snapshotPath, writeReferenceSnapshot, type ReferenceTables } from "./reference-snapshot.js";

export interface ReferenceDataOptions {
  /** Tor bulk exit list or exit-addresses file; Tor detection is off without it. */
  torExitListPath?: string | undefined;
  /** CIDR list of hosting ranges; defaults to the (empty) reference/datacenter-ranges.txt. */
  datacenterRangesPath?: string | undefined;
  /** Override the @ip-location-db/geo-whois-asn-country CSVs (decimal "-num" format). */
  geoIpv4CsvPath?: string | undefined;
  geoIpv6CsvPath?: string | undefined;
  /** Where the compiled snapshot of the large tables is kept; defaults to {@link DEFAULT_SNAPSHOT_DIR}. */
  snapshotDir?: string | undefined;
}

/** A list file whose last read failed. */
export interface ListError {
  list: "torExits" | "datacenterRanges";
  path: string;
  error: string;
}

/** Structured-cloneable form for workerData; the typed arrays share memory. */
export interface SharedReferenceData extends ReferenceTables {
  readonly torExitListPath: string | undefined;
  readonly datacenterRangesPath: string | undefined;
}

const REFERENCE_DIRECTORY = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "reference");
export const DEFAULT_DATACENTER_RANGES_PATH = join(REFERENCE_DIRECTORY, "datacenter-ranges.txt");
/** npm's conventional cache directory of the installation, written by `npm ci` (the prepare script). */
export const DEFAULT_SNAPSHOT_DIR = join(REFERENCE_DIRECTORY, "..", "node_modules", ".cache", "fraud-decision-service");

const requireFromHere = createRequire(import.meta.url);

function packageFile(packageName: string, file: string): string {
  return join(dirname(requireFromHere.resolve(`${packageName}/package.json`)), file);
}

function readJsonStringArray(path: string): string[] {
  const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
  if (!Array.isArray(parsed) || !parsed.every((entry) => typeof entry === "string")) {
    throw new Error(`${path} is not a JSON array of strings`);
  }
  return parsed;
}

interface ReferenceDataParts {
  geo: GeoCountryTable | SharedGeoCountryTable;
  disposableDomains: DomainList | SharedDomainList;
  disposableWildcardDomains: readonly string[];
  torExitListPath: string | undefined;
  datacenterRangesPath: string | undefined;
}

/** The files the large tables are built from. */
function sourcesOf(options: ReferenceDataOptions) {
  const geoPackage = "@ip-location-db/geo-whois-asn-country";
  return {
    geoIpv4: options.geoIpv4CsvPath ?? packageFile(geoPackage, "geo-whois-asn-country-ipv4-num.csv"),
    geoIpv6: options.geoIpv6CsvPath ?? packageFile(geoPackage, "geo-whois-asn-country-ipv6-num.csv"),
    disposable: packageFile("disposable-email-domains", "index.json"),
    disposableWildcards: packageFile("disposable-email-domains", "wildcard.json"),
  };
}

function listPaths(options: ReferenceDataOptions) {
  return {
    torExitListPath: options.torExitListPath,
    datacenterRangesPath: options.datacenterRangesPath ?? DEFAULT_DATACENTER_RANGES_PATH,
  };
}

export class ReferenceData {
  readonly geo: GeoCountryTable;
  readonly disposableDomains: DomainList;
  /** Domains whose every subdomain is disposable (disposable-email-domains wildcard.json). */
  readonly disposableWildcardDomains: ReadonlySet<string>;
  readonly torExits: ReloadableFile<TorExitSet>;
  readonly datacenterRanges: ReloadableFile<IpRangeSet>;

  private constructor(parts: ReferenceDataParts) {
    this.geo = parts.geo instanceof GeoCountryTable ? parts.geo : GeoCountryTable.fromShared(parts.geo);
    this.disposableDomains = parts.disposableDomains instanceof DomainList ? parts.disposableDomains : DomainList.fromShared(parts.disposableDomains);
    this.disposableWildcardDomains = new Set(parts.disposableWildcardDomains);
    this.torExits = new ReloadableFile<TorExitSet>(parts.torExitListPath, parseTorExitList, new Set());
    this.datacenterRanges = new ReloadableFile(parts.datacenterRangesPath, IpRangeSet.parse, IpRangeSet.EMPTY);
  }

  /** The snapshot when one built from the current sources exists, else {@link build}. */
  static load(options: ReferenceDataOptions = {}): ReferenceData {
    return ReferenceData.fromSnapshot(options) ?? ReferenceData.build(options).data;
  }

  /** The tables from the snapshot file, if there is one built from the current sources; a few milliseconds. */
  static fromSnapshot(options: ReferenceDataOptions = {}): ReferenceData | undefined {
    const sources = sourcesOf(options);
    const tables = readReferenceSnapshot(snapshotPath(options.snapshotDir ?? DEFAULT_SNAPSHOT_DIR), snapshotKey(Object.values(sources)));
    return tables && new ReferenceData({ ...tables, ...listPaths(options) });
  }

  /**
   * Reads and indexes every source (about half a second and 100 MB of
   * transient memory), then writes the snapshot for the next start. A
   * snapshot that cannot be written (a read-only installation) only costs
   * the next start the same time again; `snapshotError` says why.
   */
  static build(options: ReferenceDataOptions = {}): { data: ReferenceData; snapshotError: string | undefined } {
    const sources = sourcesOf(options);
    const data = new ReferenceData({
      geo: GeoCountryTable.loadFromCsvFiles(sources.geoIpv4, sources.geoIpv6),
      disposableDomains: DomainList.build(readJsonStringArray(sources.disposable)),
      disposableWildcardDomains: readJsonStringArray(sources.disposableWildcards).map((domain) => domain.toLowerCase()),
      ...listPaths(options),
    });
    try {
      writeReferenceSnapshot(snapshotPath(options.snapshotDir ?? DEFAULT_SNAPSHOT_DIR), snapshotKey(Object.values(sources)), data.toShared());
      return { data, snapshotError: undefined };
    } catch (error) {
      return { data, snapshotError: String(error) };
    }
  }

  /** Rebuilds reference data in a worker from toShared() output without copying the big tables. */
  static fromShared(shared: SharedReferenceData): ReferenceData {
    return new ReferenceData(shared);
  }

  toShared(): SharedReferenceData {
    return {
      geo: this.geo.toShared(),
      disposableDomains: this.disposableDomains.toShared(),
      disposableWildcardDomains: [...this.disposableWildcardDomains],
      torExitListPath: this.torExits.path,
      datacenterRangesPath: this.datacenterRanges.path,
    };
  }

  /** Bytes held in SharedArrayBuffers (shared by all threads). */
  get sharedByteLength(): number {
    return this.geo.byteLength + this.disposableDomains.byteLength;
  }

  /** The list files whose last read failed, and why (a list that cannot be read stays as it was: empty at start). */
  listErrors(): ListError[] {
    const errors: ListError[] = [];
    for (const list of ["torExits", "datacenterRanges"] as const) {
      const { path, lastError } = this[list];
      if (path !== undefined && lastError !== null) errors.push({ list, path, error: lastError });
    }
    return errors;
  }

  /** Re-reads the Tor and datacenter lists if their files changed; one stat() each otherwise. */
  reloadIfChanged(): { torExits: boolean; datacenterRanges: boolean } {
    return { torExits: this.torExits.reloadIfChanged(), datacenterRanges: this.datacenterRanges.reloadIfChanged() };
  }

  /**
   * Polls both list files every `intervalMs` and reloads a changed one;
   * `onReload` lets the caller log it. Returns a function that stops watching.
   */
  watch(intervalMs: number, onReload?: (list: "torExits" | "datacenterRanges") => void): () => void {
    const stopTor = this.torExits.watch(intervalMs, () => onReload?.("torExits"));
    const stopDatacenter = this.datacenterRanges.watch(intervalMs, () => onReload?.("datacenterRanges"));
    return () => {
      stopTor();
      stopDatacenter();
    };
  }
}
