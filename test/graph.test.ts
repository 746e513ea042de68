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

  it("links through an IP address at one hop only: everyone behind an office's address shares it", () => {
    const shop = { accountId: "acct_shop", environment: "live" } as const;
    // Bob works at the office; later a fraudster decides from the office too and is labelled.
    graph.recordEdges(shop, "dec_bob_office", ["u:bob", "d:bob_laptop", "i:81.2.69.200"], 1);
    graph.recordEdges(shop, "dec_eve_office", ["u:eve", "d:eve_phone", "i:81.2.69.200"], 2);
    graph.label(shop, "dec_eve_office", ["u:eve", "d:eve_phone", "i:81.2.69.200"], true);
    // At the office, the address itself is labelled: one hop.
    expect(graph.lookup(shop, ["u:carol", "d:carol_laptop", "i:81.2.69.200"])).toEqual({ linkedToFraud: true, hops: 1, fraudNeighbours: 1 });
    // Bob from home: his earlier office decision carries the labelled address, which is no second hop.
    expect(graph.lookup(shop, ["u:bob", "d:bob_laptop", "i:81.2.69.7"])).toEqual({ linkedToFraud: false, hops: null, fraudNeighbours: 0 });
    // Nor does the office address walk to the fraudster's device for someone who merely shares it.
    graph.recordEdges(shop, "dec_dave_office", ["u:dave", "i:81.2.69.201"], 3);
    graph.recordEdges(shop, "dec_eve_again", ["u:eve_alias", "d:eve_phone", "i:81.2.69.201"], 4);
    expect(graph.lookup(shop, ["u:frank", "i:81.2.69.201"])).toEqual({ linkedToFraud: false, hops: null, fraudNeighbours: 0 });
    // Devices, users, e-mails and cards still link at two hops.
    expect(graph.lookup(shop, ["u:eve_alias"])).toEqual({ linkedToFraud: true, hops: 2, fraudNeighbours: 1 });
  });
});
