import { describe, expect, it } from "vitest";
import { structureProblem } from "../src/server/json-keys.js";
import { seededRandom } from "./helpers/random.js";

/** The first key an object of `json` repeats, at any depth; undefined when none does. */
function repeatedKey(json: string): string | undefined {
  const problem = structureProblem(json, Number.POSITIVE_INFINITY);
  return problem?.kind === "repeated-key" ? problem.key : undefined;
}

describe("repeated keys in a JSON body", () => {
  it("finds a key an object repeats, at any depth, compared decoded", () => {
    expect(repeatedKey('{"userId":"victim","action":"login","userId":"decoy"}')).toBe("userId");
    expect(repeatedKey('{"metadata":{"a":1,"b":{"c":2,"c":3}}}')).toBe("c");
    expect(repeatedKey('{"a":1,"\\u0061":2}')).toBe("a");
    expect(repeatedKey('[{"a":1},{"a":2}]')).toBeUndefined();
  });

  it("stays linear for an object of many keys", () => {
    const many = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, i]));
    const text = JSON.stringify(many);
    expect(repeatedKey(text)).toBeUndefined();
    expect(repeatedKey(`${text.slice(0, -1)},"k19999":0}`)).toBe("k19999");
    expect(repeatedKey(`${text.slice(0, -1)},"k3":0}`)).toBe("k3");
  });

  it("tells keys from values and from strings that look like keys", () => {
    expect(repeatedKey('{"a":"a","b":"a"}')).toBeUndefined();
    expect(repeatedKey('{"a":"x\\":1,\\"a","b" : ["a", "a"], "c" :{"a":{}}}')).toBeUndefined();
    expect(repeatedKey('{ "a" : 1 , "b" : { "a" : 2 } , "a" : 3 }')).toBe("a");
    expect(repeatedKey('{"a\\\\":1,"a":2}')).toBeUndefined();
  });

  it("agrees with a decoding walk on random bodies", () => {
    const next = seededRandom(20261122);
    const random = (depth: number): unknown => {
      const pick = next();
      if (depth > 3 || pick < 0.4) return ["x", 1, true, null, 'q"\\uo'][Math.floor(next() * 5)];
      if (pick < 0.6) return Array.from({ length: Math.floor(next() * 4) }, () => random(depth + 1));
      const object: Record<string, unknown> = {};
      for (let i = 0; i < Math.floor(next() * 4); i++) object[["a", "b", 'c"', "\\"][Math.floor(next() * 4)] ?? "a"] = random(depth + 1);
      return object;
    };
    for (let i = 0; i < 500; i++) {
      const text = JSON.stringify(random(0));
      expect(repeatedKey(text), text).toBeUndefined();
      // The same text with its first object's first member written twice repeats that key.
      const member = /\{("(?:[^"\\]|\\.)*"):((?:[^,{}[\]"]|"(?:[^"\\]|\\.)*")+)[,}]/.exec(text);
      if (member) {
        const doubled = text.replace(member[0], `{${member[1]}:${member[2]},${member[0].slice(1)}`);
        expect(repeatedKey(doubled), doubled).toBe(JSON.parse(member[1] ?? '""'));
      }
    }
  });
});
