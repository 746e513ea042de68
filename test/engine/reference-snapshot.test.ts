import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadSharedReference } from "../../src/decisions/reference-loader.js";
import { ReferenceData, parseIp } from "../../src/engine/index.js";
import { snapshotPath } from "../../src/engine/reference-snapshot.js";

const dirs: string[] = [];
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-snapshot-"));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** Small country CSVs in the package's "-num" format, so that each build is quick. */
function sources(): { geoIpv4CsvPath: string; geoIpv6CsvPath: string } {
  const dir = tempDir();
  const geoIpv4CsvPath = path.join(dir, "v4.csv");
  const geoIpv6CsvPath = path.join(dir, "v6.csv");
  // 8.8.8.0/24 US, 81.2.69.0/24 GB with 81.2.69.128/25 nested as FR.
  fs.writeFileSync(geoIpv4CsvPath, "134744064,134744319,US\n1359103232,1359103487,GB\n1359103360,1359103487,FR\n");
  // 2001:4860::/32 US.
  fs.writeFileSync(geoIpv6CsvPath, "42541956101370907050197289607612071936,42541956180599069564461627201156022271,US\n");
  return { geoIpv4CsvPath, geoIpv6CsvPath };
}

function country(data: ReferenceData, ip: string): string {
  const parsed = parseIp(ip);
  if (!parsed) throw new Error(`bad test address ${ip}`);
  return data.geo.lookup(parsed);
}

describe("reference table snapshot", () => {
  it("is written by a build and read back with the same tables", () => {
    const options = { ...sources(), snapshotDir: tempDir() };
    expect(ReferenceData.fromSnapshot(options)).toBeUndefined();
    const { data: built, snapshotError } = ReferenceData.build(options);
    expect(snapshotError).toBeUndefined();
    expect(fs.existsSync(snapshotPath(options.snapshotDir))).toBe(true);

    const read = ReferenceData.fromSnapshot(options);
    if (!read) throw new Error("no snapshot read back");
    const a = built.toShared();
    const b = read.toShared();
    expect(b.geo.v4Starts.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect([...b.geo.v4Starts]).toEqual([...a.geo.v4Starts]);
    expect([...b.geo.v4Countries]).toEqual([...a.geo.v4Countries]);
    expect([...b.geo.v6Starts]).toEqual([...a.geo.v6Starts]);
    expect([...b.geo.v6Countries]).toEqual([...a.geo.v6Countries]);
    expect(Buffer.from(b.disposableDomains.bytes).equals(Buffer.from(a.disposableDomains.bytes))).toBe(true);
    expect([...b.disposableDomains.offsets]).toEqual([...a.disposableDomains.offsets]);
    expect(b.disposableWildcardDomains).toEqual(a.disposableWildcardDomains);

    expect(country(read, "8.8.8.8")).toBe("US");
    expect(country(read, "81.2.69.1")).toBe("GB");
    expect(country(read, "81.2.69.200")).toBe("FR");
    expect(country(read, "2001:4860::8888")).toBe("US");
    expect(country(read, "9.9.9.9")).toBe("");
    expect(read.disposableDomains.has("mailinator.com")).toBe(true);
    expect(read.disposableDomains.has("example.com")).toBe(false);
  });

  it("is ignored once a source file changes, and rebuilt by load", () => {
    const options = { ...sources(), snapshotDir: tempDir() };
    ReferenceData.build(options);
    expect(ReferenceData.fromSnapshot(options)).toBeDefined();
    // A newer database: 9.9.9.0/24 becomes CH.
    const rows = fs.readFileSync(options.geoIpv4CsvPath, "utf8").split("\n");
    rows.splice(1, 0, "151587072,151587327,CH");
    fs.writeFileSync(options.geoIpv4CsvPath, rows.join("\n"));
    expect(ReferenceData.fromSnapshot(options)).toBeUndefined();
    expect(country(ReferenceData.load(options), "9.9.9.9")).toBe("CH");
    const reread = ReferenceData.fromSnapshot(options);
    expect(reread && country(reread, "9.9.9.9")).toBe("CH");
  });

  it("treats a damaged snapshot as missing instead of failing or misreading", () => {
    const options = { ...sources(), snapshotDir: tempDir() };
    ReferenceData.build(options);
    const file = snapshotPath(options.snapshotDir);
    const whole = fs.readFileSync(file);
    for (const damaged of [whole.subarray(0, whole.length - 3), whole.subarray(0, 2), Buffer.from("not a snapshot at all"), Buffer.alloc(0)]) {
      fs.writeFileSync(file, damaged);
      expect(ReferenceData.fromSnapshot(options)).toBeUndefined();
    }
    // A header that claims more than the file holds.
    const header = Buffer.from(JSON.stringify({ version: 1, key: "x", sections: [{ name: "geo.v4Starts", type: "Uint32Array", length: 1e9 }], disposableWildcardDomains: [] }));
    const lying = Buffer.alloc(4 + header.length);
    lying.writeUInt32LE(header.length, 0);
    header.copy(lying, 4);
    fs.writeFileSync(file, lying);
    expect(ReferenceData.fromSnapshot(options)).toBeUndefined();
    expect(country(ReferenceData.load(options), "8.8.8.8")).toBe("US");
  });

  it("still serves the tables when the snapshot cannot be written, and says why", () => {
    const blocked = path.join(tempDir(), "a-file");
    fs.writeFileSync(blocked, "");
    // A directory inside a regular file cannot be created.
    const { data, snapshotError } = ReferenceData.build({ ...sources(), snapshotDir: path.join(blocked, "cache") });
    expect(snapshotError).toMatch(/ENOTDIR|EEXIST/);
    expect(country(data, "8.8.8.8")).toBe("US");
  });

  it("is built in a worker thread by the service's first start and read by the next", async () => {
    const options = { ...sources(), snapshotDir: tempDir() };
    const first = await loadSharedReference(options);
    expect(first.source).toBe("built");
    expect(first.snapshotError).toBeUndefined();
    const second = await loadSharedReference(options);
    expect(second.source).toBe("snapshot");
    expect(country(ReferenceData.fromShared(second.shared), "81.2.69.200")).toBe("FR");
  });
});
