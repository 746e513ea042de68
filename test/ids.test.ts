import { describe, expect, it } from "vitest";
import { newId, randomBase62 } from "../src/ids.js";

describe("identifiers", () => {
  it("are the prefix, an underscore and 22 base62 characters", () => {
    for (const prefix of ["dec", "evi", "req", "case"] as const) {
      expect(newId(prefix)).toMatch(new RegExp(`^${prefix}_[0-9A-Za-z]{22}$`));
    }
  });

  it("sort by creation time, to the millisecond, over the whole range of dates", () => {
    const times = [0, 1, 61, 62, 1_700_000_000_000, 1_700_000_000_001, Date.UTC(2026, 10, 21), Date.UTC(2999, 0, 1)];
    const ids = times.map((ms) => newId("dec", ms));
    expect([...ids].sort()).toEqual(ids);
    // Decisions made later never sort before earlier ones, whatever their random parts.
    for (let i = 0; i < 1000; i++) expect(newId("dec", 1_700_000_000_001) > newId("dec", 1_700_000_000_000)).toBe(true);
  });

  it("differ within the same millisecond", () => {
    const ids = new Set(Array.from({ length: 50_000 }, () => newId("evi", 1_700_000_000_000)));
    expect(ids.size).toBe(50_000);
    // Same time part, different random part.
    expect(new Set([...ids].map((id) => id.slice(4, 12))).size).toBe(1);
  });

  it("draw random characters uniformly from all 62 symbols", () => {
    const counts = new Map<string, number>();
    for (const char of randomBase62(62_000)) counts.set(char, (counts.get(char) ?? 0) + 1);
    expect(counts.size).toBe(62);
    for (const count of counts.values()) expect(count).toBeGreaterThan(800);
  });
});
