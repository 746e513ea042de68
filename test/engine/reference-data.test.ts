import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_DATACENTER_RANGES_PATH, ReferenceData, computeFastSignals, parseIp } from "../../src/engine/index.js";
import { IpRangeSet } from "../../src/engine/ip-lists.js";
import type { SharedReferenceData } from "../../src/engine/index.js";
import { cleanDesktopLogin, TOR_BULK_EXIT_LIST, TOR_EXIT_ADDRESSES } from "./fixtures.js";

let directory: string;
let torPath: string;
let datacenterPath: string;
let data: ReferenceData;

beforeAll(() => {
  directory = mkdtempSync(join(tmpdir(), "engine-reference-"));
  torPath = join(directory, "tor-exits.txt");
  datacenterPath = join(directory, "datacenter.txt");
  writeFileSync(torPath, TOR_BULK_EXIT_LIST);
  writeFileSync(datacenterPath, "# test hosting ranges\n5.9.0.0/16\n2a01:4f8::/32\n");
  data = ReferenceData.load({ torExitListPath: torPath, datacenterRangesPath: datacenterPath });
});

afterAll(() => {
  rmSync(directory, { recursive: true, force: true });
});

function countryOf(text: string): string {
  const ip = parseIp(text);
  if (ip === null) throw new Error(`${text} did not parse`);
  return data.geo.lookup(ip);
}

describe("country database", () => {
  it("answers what the shipped geo-whois-asn-country data says", () => {
    // Values checked against the CSV rows of the installed package version.
    expect(countryOf("8.8.8.8")).toBe("US");
    expect(countryOf("1.1.1.1")).toBe("AU");
    expect(countryOf("81.2.69.160")).toBe("GB");
    expect(countryOf("2001:4860:4860::8888")).toBe("US");
    expect(countryOf("2a00:1450:4001::1")).toBe("IE");
  });

  it("lets a nested, more specific row win over its enclosing block and resumes after it", () => {
    // Rows: 37405696-37406207 DE, then 37405967 BE inside it, then 37405968-37406207 DE.
    expect(data.geo.lookup({ version: 4, value: 37405966, text: "" })).toBe("DE");
    expect(data.geo.lookup({ version: 4, value: 37405967, text: "" })).toBe("BE");
    // Rows: 50471680-50471743 DE with 50471720-50471727 TR nested.
    expect(data.geo.lookup({ version: 4, value: 50471722, text: "" })).toBe("TR");
    expect(data.geo.lookup({ version: 4, value: 50471743, text: "" })).toBe("DE");
  });

  it("has no country for unregistered space", () => {
    expect(countryOf("10.0.0.1")).toBe("");
    expect(countryOf("::1")).toBe("");
  });

  it("keeps its big tables in SharedArrayBuffers", () => {
    const shared = data.toShared();
    expect(shared.geo.v4Starts.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(shared.geo.v6Starts.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(shared.disposableDomains.bytes.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(data.sharedByteLength).toBeGreaterThan(1_000_000);
  });
});

describe("sharing with worker threads", () => {
  it("passes through workerData without copying and rehydrates", async () => {
    const shared = data.toShared();
    // The worker marks the first country code; the mark must be visible here,
    // which proves the worker saw the same memory, not a copy.
    const workerSource = `
      const { workerData, parentPort } = require("node:worker_threads");
      const countries = workerData.geo.v4Countries;
      const isShared = countries.buffer instanceof SharedArrayBuffer;
      const original = countries[0];
      countries[0] = 0x5858; // "XX"
      parentPort.postMessage({ isShared, original });
    `;
    const reply = await new Promise<{ isShared: boolean; original: number }>((resolve, reject) => {
      const worker = new Worker(workerSource, { eval: true, workerData: shared });
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    expect(reply.isShared).toBe(true);
    expect(shared.geo.v4Countries[0]).toBe(0x5858);
    shared.geo.v4Countries[0] = reply.original;

    const rehydrated = ReferenceData.fromShared(structuredClone(shared) as SharedReferenceData);
    const ip = parseIp("8.8.8.8");
    expect(ip && rehydrated.geo.lookup(ip)).toBe("US");
    expect(rehydrated.disposableDomains.has("mailinator.com")).toBe(true);
    expect(rehydrated.torExits.current.has("185.220.101.1")).toBe(true);
  });
});

describe("Tor exit list file", () => {
  it("flags exits from the bulk list", () => {
    const signals = computeFastSignals({ ...cleanDesktopLogin(), ip: "185.220.101.45" }, data);
    expect(signals.network.tor).toBe(true);
    expect(signals.geo.country).not.toBe("");
    expect(computeFastSignals(cleanDesktopLogin(), data).network.tor).toBe(false);
  });

  it("is cheap to re-check and reloads when the file is replaced", () => {
    expect(data.torExits.reloadIfChanged()).toBe(false);
    const replacement = join(directory, "tor-exits.next");
    writeFileSync(replacement, TOR_EXIT_ADDRESSES);
    renameSync(replacement, torPath);
    expect(data.reloadIfChanged()).toEqual({ torExits: true, datacenterRanges: false });
    expect(data.torExits.current.has("204.8.96.88")).toBe(true);
    expect(data.torExits.current.has("185.220.101.45")).toBe(false);
    expect(data.torExits.reloadIfChanged()).toBe(false);
  });

  it("keeps the last good list when the file disappears", () => {
    const before = data.torExits.current;
    rmSync(torPath);
    expect(data.torExits.reloadIfChanged()).toBe(false);
    expect(data.torExits.lastError).toMatch(/ENOENT/);
    expect(data.torExits.current).toBe(before);
    writeFileSync(torPath, TOR_BULK_EXIT_LIST);
    expect(data.torExits.reloadIfChanged()).toBe(true);
    expect(data.torExits.lastError).toBeNull();
  });

  it("watch() picks up a change without an explicit call", async () => {
    const reloaded = new Promise<string>((resolve) => {
      const stop = data.watch(20, (list) => {
        stop();
        resolve(list);
      });
    });
    writeFileSync(datacenterPath, "# grown\n5.9.0.0/16\n2a01:4f8::/32\n88.198.0.0/16\n");
    expect(await reloaded).toBe("datacenterRanges");
    const ip = parseIp("88.198.1.1");
    expect(ip && data.datacenterRanges.current.contains(ip)).toBe(true);
  });
});

describe("datacenter ranges", () => {
  it("flags addresses in the configured ranges, IPv4 and IPv6", () => {
    expect(computeFastSignals({ ...cleanDesktopLogin(), ip: "5.9.10.11" }, data).network.datacenter).toBe(true);
    expect(computeFastSignals({ ...cleanDesktopLogin(), ip: "2a01:4f8:1::2" }, data).network.datacenter).toBe(true);
    expect(computeFastSignals(cleanDesktopLogin(), data).network.datacenter).toBe(false);
  });

  it("ships an empty, documented default list", () => {
    const text = readFileSync(DEFAULT_DATACENTER_RANGES_PATH, "utf8");
    expect(text).toMatch(/ships EMPTY on purpose/);
    expect(IpRangeSet.parse(text).size).toBe(0);
  });

  it("is off (empty, no error) without a Tor list path", () => {
    const withoutTor = ReferenceData.fromShared({ ...data.toShared(), torExitListPath: undefined });
    expect(withoutTor.torExits.current.size).toBe(0);
    expect(withoutTor.torExits.lastError).toBeNull();
  });
});
