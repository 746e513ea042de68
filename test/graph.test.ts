import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/store/database.js";
import { GraphRepository } from "../src/store/graph.js";

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-graph-"));
const db = openDatabase(dataDir);
afterAll(() => {
  db.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe("fraud graph lookup", () => {
  const graph = new GraphRepository(db);
  const acme = { accountId: "acct_acme", environment: "live" } as const;
  const other = { accountId: "acct_other", environment: "live" } as const;

  it("finds nothing while the account has no fraud label, then one and two hops once it has", () => {
    graph.recordEdges(acme, "dec_1", ["u:mallory", "d:phone", "i:203.0.113.9"], 1);
    graph.recordEdges(acme, "dec_2", ["u:alice", "d:laptop"], 2);
    const none = { linkedToFraud: false, hops: null, fraudNeighbours: 0 };
    expect(graph.lookup(acme, ["u:newcomer", "d:phone"])).toEqual(none);

    // A label in another account, or in the other environment, changes nothing here.
    graph.recordEdges(other, "dec_3", ["u:mallory", "d:phone"], 3);
    graph.label(other, "dec_3", ["u:mallory", "d:phone"], true);
    graph.recordEdges({ ...acme, environment: "test" }, "dec_4", ["d:phone"], 4);
    graph.label({ ...acme, environment: "test" }, "dec_4", ["d:phone"], true);
    expect(graph.lookup(acme, ["u:newcomer", "d:phone"])).toEqual(none);

    // Mallory is confirmed fraud: her device links a newcomer in one hop, her IP's other decision in two.
    expect(graph.label(acme, "dec_1", ["u:mallory"], true)).toBe(true);
    expect(graph.lookup(acme, ["u:mallory"])).toEqual({ linkedToFraud: true, hops: 1, fraudNeighbours: 1 });
    expect(graph.lookup(acme, ["u:newcomer", "d:phone"])).toEqual({ linkedToFraud: true, hops: 2, fraudNeighbours: 1 });
    expect(graph.lookup(acme, ["u:alice", "d:laptop"])).toEqual(none);

    // A legitimate relabel takes the label off again.
    graph.label(acme, "dec_1", ["u:mallory"], false);
    expect(graph.lookup(acme, ["u:newcomer", "d:phone"])).toEqual(none);
  });
});
