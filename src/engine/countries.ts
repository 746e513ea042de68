// Country reference points and UTC offset ranges (reference/countries.tsv,
// generated from tzdata by reference/build-countries.mjs), plus the time zone
// and distance arithmetic the device and history signals need. The table is
// 250 short rows that never change while the service runs, so it is read once
// when the module loads, in every thread, rather than shared.

import { readFileSync } from "node:fs";

export interface CountryInfo {
  readonly code: string;
  /** Principal location of the country's most populous time zone. */
  readonly latitude: number;
  readonly longitude: number;
  /** Smallest and largest UTC offset in use anywhere in the country over the year. */
  readonly minOffsetMinutes: number;
  readonly maxOffsetMinutes: number;
}

function parseCountryTable(text: string): CountryInfo[] {
  const countries: CountryInfo[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const [code = "", latitude, longitude, minOffset, maxOffset] = line.split("\t");
    countries.push({
      code,
      latitude: Number(latitude),
      longitude: Number(longitude),
      minOffsetMinutes: Number(minOffset),
      maxOffsetMinutes: Number(maxOffset),
    });
  }
  return countries;
}

const COUNTRIES_PATH = new URL("../../reference/countries.tsv", import.meta.url);

/** Keyed by ISO 3166-1 alpha-2 code. */
export const COUNTRIES: ReadonlyMap<string, CountryInfo> = new Map(
  parseCountryTable(readFileSync(COUNTRIES_PATH, "utf8")).map((country) => [country.code, country]),
);

/** Minutes between an offset and the country's offset range; 0 when inside it. */
export function offsetGapMinutes(country: CountryInfo, offsetMinutes: number): number {
  // Offsets wrap around the date line: +13:00 (Tonga) is 1 hour from -12:00.
  const gapTo = (target: number): number => {
    const difference = Math.abs(offsetMinutes - target) % 1440;
    return Math.min(difference, 1440 - difference);
  };
  if (offsetMinutes >= country.minOffsetMinutes && offsetMinutes <= country.maxOffsetMinutes) return 0;
  return Math.min(gapTo(country.minOffsetMinutes), gapTo(country.maxOffsetMinutes));
}

const EARTH_RADIUS_KM = 6371;

/** Great-circle distance between two countries' reference points. */
export function distanceKm(from: CountryInfo, to: CountryInfo): number {
  const toRadians = (degrees: number): number => (degrees * Math.PI) / 180;
  const deltaLatitude = toRadians(to.latitude - from.latitude);
  const deltaLongitude = toRadians(to.longitude - from.longitude);
  const a =
    Math.sin(deltaLatitude / 2) ** 2 +
    Math.cos(toRadians(from.latitude)) * Math.cos(toRadians(to.latitude)) * Math.sin(deltaLongitude / 2) ** 2;
  return 2 * EARTH_RADIUS_KM * Math.asin(Math.min(1, Math.sqrt(a)));
}

// Creating an Intl.DateTimeFormat costs tens of microseconds, so formatters are
// kept, one per zone: keyed by the zone's canonical name, a closed set of a few
// hundred. Clients can spell a zone in endless ways (Intl accepts any case, and
// aliases), so what each spelling resolves to, or that it is invalid, is kept in
// a map that starts over when full: a client inventing spellings costs a
// formatter's construction per call, never memory.
const formatters = new Map<string, Intl.DateTimeFormat>();
const SPELLING_CACHE_LIMIT = 2000;
const canonicalBySpelling = new Map<string, string | null>();

/** The canonical name of `timeZone` with its formatter; null for an unknown zone. */
function zoneFor(timeZone: string): { name: string; formatter: Intl.DateTimeFormat } | null {
  let name = canonicalBySpelling.get(timeZone);
  if (name === undefined) {
    name = null;
    try {
      const formatter = new Intl.DateTimeFormat("en-US", { timeZone, timeZoneName: "longOffset" });
      name = formatter.resolvedOptions().timeZone;
      if (!formatters.has(name)) formatters.set(name, formatter);
    } catch {
      // not a zone Intl knows
    }
    if (canonicalBySpelling.size >= SPELLING_CACHE_LIMIT) canonicalBySpelling.clear();
    canonicalBySpelling.set(timeZone, name);
  }
  if (name === null) return null;
  const formatter = formatters.get(name);
  return formatter === undefined ? null : { name, formatter };
}

/** How many zones have a formatter, and how many spellings are remembered; for tests of the caches' bounds. */
export function timeZoneCacheSizes(): { formatters: number; spellings: number; offsets: number } {
  return { formatters: formatters.size, spellings: canonicalBySpelling.size, offsets: offsetCache.size };
}

// Offsets only change at DST transitions, which fall on quarter-hour UTC
// boundaries, so one computed offset is reused for the rest of its quarter.
const QUARTER_HOUR_MS = 15 * 60 * 1000;
const offsetCache = new Map<string, { quarter: number; offsetMinutes: number }>();

/** UTC offset of an IANA time zone at `atMs`, in minutes east of UTC; null for an unknown zone. */
export function timeZoneOffsetMinutes(timeZone: string, atMs: number): number | null {
  if (timeZone === "") return null;
  const zone = zoneFor(timeZone);
  if (zone === null) return null;
  const quarter = Math.floor(atMs / QUARTER_HOUR_MS);
  const cached = offsetCache.get(zone.name);
  if (cached !== undefined && cached.quarter === quarter) return cached.offsetMinutes;
  const name = zone.formatter.formatToParts(atMs).find((part) => part.type === "timeZoneName")?.value ?? "";
  const match = /^GMT(?:([+-])(\d{1,2}):?(\d{2})?)?$/.exec(name);
  if (match === null) return null;
  const magnitude = match[1] === undefined ? 0 : Number(match[2]) * 60 + Number(match[3] ?? 0);
  const offsetMinutes = match[1] === "-" ? -magnitude : magnitude;
  // Keyed by canonical name, so the cache stays as small as the zone list.
  offsetCache.set(zone.name, { quarter, offsetMinutes });
  return offsetMinutes;
}
