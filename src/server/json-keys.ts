// What JSON.parse lets through and a REST body must not hold, found in one pass over its text: nesting past a
// depth, a key repeated in one object (JSON.parse keeps the last; Connect's JSON refuses them, and a proxy
// or log that reads the first would see another request than the service decides on), and the key
// "__proto__" (JSON.parse makes it an own key; protobuf-es, building metadata from it, drops it unread). Run over text that
// JSON.parse has accepted: only strings, objects and arrays need telling apart.

/** Keys an object's list holds before it becomes a set. */
const FEW_KEYS = 16;
const QUOTE = 0x22;
const QUOTE_CHARACTER = '"';
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/** What is wrong with a body's structure, the first met in its text. */
export type StructureProblem = { kind: "too-deep" } | { kind: "repeated-key"; key: string } | { kind: "prototype-key" };

/** The key JavaScript objects take as their prototype when it is assigned, rather than as data. */
export const PROTOTYPE_KEY = "__proto__";

/** The first problem of `json` (valid JSON): objects and arrays nested past `maxDepth`, a repeated key, or "__proto__". */
export function structureProblem(json: string, maxDepth: number): StructureProblem | undefined {
  // The keys seen in each open object: a list while it holds a few (quicker than a set), then a set, so that
  // an object of thousands of keys costs no more per key; null for an open array.
  const open: Array<string[] | Set<string> | null> = [];
  let at = 0;
  while (at < json.length) {
    const code = json.charCodeAt(at);
    if (code === QUOTE) {
      const end = stringEnd(json, at);
      const keys = open[open.length - 1];
      let next = end + 1;
      if (keys) {
        while (next < json.length && json.charCodeAt(next) <= 0x20) next++;
        if (json.charCodeAt(next) === COLON) {
          const raw = json.slice(at + 1, end);
          // Compared decoded: "a" and "\u0061" are one key.
          const key = raw.includes("\\") ? (JSON.parse(`"${raw}"`) as string) : raw;
          if (key === PROTOTYPE_KEY) return { kind: "prototype-key" };
          if (Array.isArray(keys)) {
            if (keys.includes(key)) return { kind: "repeated-key", key };
            if (keys.push(key) > FEW_KEYS) open[open.length - 1] = new Set(keys);
          } else {
            if (keys.has(key)) return { kind: "repeated-key", key };
            keys.add(key);
          }
        }
      }
      at = next;
      continue;
    }
    if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      if (open.push(code === OPEN_OBJECT ? [] : null) > maxDepth) return { kind: "too-deep" };
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) open.pop();
    at++;
  }
  return undefined;
}

/** Where the string that opens at `start` closes: the next quote not escaped by an odd run of backslashes. */
function stringEnd(json: string, start: number): number {
  let end = json.indexOf(QUOTE_CHARACTER, start + 1);
  for (;;) {
    let backslashes = 0;
    while (json.charCodeAt(end - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return end;
    end = json.indexOf(QUOTE_CHARACTER, end + 1);
  }
}
