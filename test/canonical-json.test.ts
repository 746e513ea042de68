import { describe, expect, it } from "vitest";
import { canonicalJson } from "../src/canonical-json.js";
import type { JsonValue } from "../src/canonical-json.js";
import { seededRandom } from "./helpers/random.js";

describe("canonicalJson", () => {
  it("sorts members at every depth and leaves arrays in order", () => {
    const a: JsonValue = { b: 1, a: { d: [3, 1, { z: true, y: null }], c: "x" } };
    const b: JsonValue = { a: { c: "x", d: [3, 1, { y: null, z: true }] }, b: 1 };
    expect(canonicalJson(a)).toBe('{"a":{"c":"x","d":[3,1,{"y":null,"z":true}]},"b":1}');
    expect(canonicalJson(b)).toBe(canonicalJson(a));
  });

  it("orders keys by UTF-16 code units and escapes strings as JSON.stringify does", () => {
    expect(canonicalJson({ é: 1, Z: 2, a: 3, "": 4 })).toBe('{"":4,"Z":2,"a":3,"é":1}');
    expect(canonicalJson("line\nbreak \u2028 \"quoted\" \ud800")).toBe(JSON.stringify("line\nbreak \u2028 \"quoted\" \ud800"));
  });

  it("is stable across a JSON round trip", () => {
    const value: JsonValue = { n: [0, -0, 1e21, 0.1, -5.5e-7], s: "ü", nested: { k: [] } };
    const text = canonicalJson(value);
    expect(canonicalJson(JSON.parse(text) as JsonValue)).toBe(text);
    expect(text).toBe('{"n":[0,0,1e+21,0.1,-5.5e-7],"nested":{"k":[]},"s":"ü"}');
  });

  it("leaves out undefined members, as JSON.stringify does", () => {
    const optional: { a?: number; b: number } = { a: undefined, b: 1 };
    expect(canonicalJson(optional as JsonValue)).toBe('{"b":1}');
  });

  it("refuses numbers and objects JSON cannot carry", () => {
    expect(() => canonicalJson(Number.NaN)).toThrow(TypeError);
    expect(() => canonicalJson({ x: Number.POSITIVE_INFINITY })).toThrow(TypeError);
    expect(() => canonicalJson({ when: new Date(0) } as unknown as JsonValue)).toThrow(TypeError);
  });

  it("sorts every object by its own keys, however many objects share a shape or nearly do", () => {
    // Shapes are remembered by their keys in insertion order: prefixes, reorderings and long objects.
    const shapes = [{ b: 1, a: 2 }, { b: 1, a: 2, c: 3 }, { b: 1 }, { a: 2, b: 1 }, {}, { 1: "x", b: 1, 0: "y" }];
    for (let round = 0; round < 3; round++) {
      for (const shape of shapes) expect(canonicalJson(shape)).toBe(JSON.stringify(Object.fromEntries(Object.keys(shape).sort().map((k) => [k, (shape as Record<string, unknown>)[k]]))));
    }
    const long = "k".repeat(10_000);
    for (let round = 0; round < 2; round++) expect(canonicalJson({ [long]: 1, a: 2 })).toBe(`{"a":2,"${long}":1}`);
    const wide = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${99 - i}`, i]));
    const text = canonicalJson(wide);
    expect(text.startsWith('{"k0":99,"k1":98,"k10":89,')).toBe(true);
    expect(canonicalJson(wide)).toBe(text);
  });

  it("gives a call made from inside another (a getter) a buffer of its own", () => {
    const inner = { z: 1, a: 2 };
    const outer = {
      b: 1,
      get a() {
        return canonicalJson(inner);
      },
    };
    expect(canonicalJson(outer)).toBe(`{"a":${JSON.stringify('{"a":2,"z":1}')},"b":1}`);
    expect(canonicalJson({ y: 1, x: 2 })).toBe('{"x":2,"y":1}');
  });

  it("writes what JSON.stringify writes, with members sorted, for random values", () => {
    const random = seededRandom(42);
    const pieces = ["a", "é", "\u2028", '"', "\\", "\n", "\u0001", "\ud83d\ude00", "\ud800", "\udc00", "z", "Z", "0", " ", "~"];
    const text = () => Array.from({ length: Math.floor(random() * 6) }, () => pieces[Math.floor(random() * pieces.length)]).join("");
    const numbers = [0, -0, 1, -1, 0.1, 1e21, 1e-7, -5.5e-7, 123456789.125, Number.MAX_SAFE_INTEGER, 2 ** -1074];
    const value = (depth: number): JsonValue => {
      const kind = Math.floor(random() * (depth > 3 ? 4 : 6));
      if (kind === 0) return text();
      if (kind === 1) return numbers[Math.floor(random() * numbers.length)] as number;
      if (kind === 2) return random() < 0.5;
      if (kind === 3) return null;
      if (kind === 4) return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1));
      return Object.fromEntries(Array.from({ length: Math.floor(random() * 5) }, () => [text(), value(depth + 1)]));
    };
    // The plain definition: JSON.stringify for everything but objects, whose members are written sorted.
    // (Not via a sorted copy: JavaScript objects put integer-like keys such as "0" first, whatever the order.)
    const reference = (v: JsonValue): string =>
      Array.isArray(v)
        ? `[${v.map(reference).join(",")}]`
        : v !== null && typeof v === "object"
          ? `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${reference(v[k] as JsonValue)}`).join(",")}}`
          : JSON.stringify(v);
    for (let i = 0; i < 2_000; i++) {
      const v = value(0);
      expect(canonicalJson(v)).toBe(reference(v));
    }
  });
});
