import { describe, expect, it } from "vitest";
import { canonicalJson } from "../src/canonical-json.js";
import type { JsonValue } from "../src/canonical-json.js";

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
});
