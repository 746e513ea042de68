// Everything the fast path looks up in memory: IP → country, Tor exits,
// datacenter ranges and disposable e-mail domains.
//
// Loading parses ~25 MB of CSV, so the service does it once on the main
// thread. The large tables (country ranges, disposable domains) live in
// SharedArrayBuffers: toShared() returns a structured-cloneable object to pass
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

export interface ReferenceDataOptions {
  /** Tor bulk exit list or exit-addresses file; Tor detection is off without it. */
  torExitListPath?: string | undefined;
  /** CIDR list of hosting ranges; defaults to the (empty) reference/datacenter-ranges.txt. */
  datacenterRangesPath?: string | undefined;
  /** Override the @ip-location-db/geo-whois-asn-country CSVs (decimal "-num" format). */
  geoIpv4CsvPath?: string | undefined;
  geoIpv6CsvPath?: string | undefined;
}

/** Structured-cloneable form for workerData; the typed arrays share memory. */
export interface SharedReferenceData {
  readonly geo: SharedGeoCountryTable;
  readonly disposableDomains: SharedDomainList;
  readonly disposableWildcardDomains: readonly string[];
  readonly torExitListPath: string | undefined;
  readonly datacenterRangesPath: string | undefined;
}

const REFERENCE_DIRECTORY = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "reference");
export const DEFAULT_DATACENTER_RANGES_PATH = join(REFERENCE_DIRECTORY, "datacenter-ranges.txt");

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
  geo: GeoCountryTable;
  disposableDomains: DomainList;
  disposableWildcardDomains: readonly string[];
  torExitListPath: string | undefined;
  datacenterRangesPath: string | undefined;
}

export class ReferenceData {
  readonly geo: GeoCountryTable;
  readonly disposableDomains: DomainList;
  /** Domains whose every subdomain is disposable (disposable-email-domains wildcard.json). */
  readonly disposableWildcardDomains: ReadonlySet<string>;
  readonly torExits: ReloadableFile<TorExitSet>;
  readonly datacenterRanges: ReloadableFile<IpRangeSet>;

  private constructor(parts: ReferenceDataParts) {
    this.geo = parts.geo;
    this.disposableDomains = parts.disposableDomains;
    this.disposableWildcardDomains = new Set(parts.disposableWildcardDomains);
    this.torExits = new ReloadableFile<TorExitSet>(parts.torExitListPath, parseTorExitList, new Set());
    this.datacenterRanges = new ReloadableFile(parts.datacenterRangesPath, IpRangeSet.parse, IpRangeSet.EMPTY);
  }

  /** Reads and indexes every source; call once per process (about half a second). */
  static load(options: ReferenceDataOptions = {}): ReferenceData {
    const geoPackage = "@ip-location-db/geo-whois-asn-country";
    const geo = GeoCountryTable.loadFromCsvFiles(
      options.geoIpv4CsvPath ?? packageFile(geoPackage, "geo-whois-asn-country-ipv4-num.csv"),
      options.geoIpv6CsvPath ?? packageFile(geoPackage, "geo-whois-asn-country-ipv6-num.csv"),
    );
    return new ReferenceData({
      geo,
      disposableDomains: DomainList.build(
        readJsonStringArray(packageFile("disposable-email-domains", "index.json")),
      ),
      disposableWildcardDomains: readJsonStringArray(packageFile("disposable-email-domains", "wildcard.json")).map(
        (domain) => domain.toLowerCase(),
      ),
      torExitListPath: options.torExitListPath,
      datacenterRangesPath: options.datacenterRangesPath ?? DEFAULT_DATACENTER_RANGES_PATH,
    });
  }

  /** Rebuilds reference data in a worker from toShared() output without copying the big tables. */
  static fromShared(shared: SharedReferenceData): ReferenceData {
    return new ReferenceData({
      geo: GeoCountryTable.fromShared(shared.geo),
      disposableDomains: DomainList.fromShared(shared.disposableDomains),
      disposableWildcardDomains: shared.disposableWildcardDomains,
      torExitListPath: shared.torExitListPath,
      datacenterRangesPath: shared.datacenterRangesPath,
    });
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
