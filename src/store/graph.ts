import { isIpEntityKey } from "../graph/entities.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

/**
 * Decisions read per entity of a request in the second hop: the most recent
 * ones. It bounds a lookup whatever an entity's degree (a shared office IP, a
 * device farm), so a lookup costs at most entities × (1 + FANOUT × entities
 * per decision) index probes (bench/graph.ts measures it at a million edges).
 */
export const GRAPH_FANOUT = 32;

/** What the fraud graph says about a request's entities (HistorySnapshot.graph). */
export interface GraphLink {
  linkedToFraud: boolean;
  /** 1: an entity of the request is fraud-labelled; 2: it appeared in a decision with one; null: neither. */
  hops: number | null;
  /** Distinct fraud-labelled entities within two hops. */
  fraudNeighbours: number;
}

/**
 * The fraud graph (docs/feedback.md): a bipartite graph of decisions and the
 * entities they carried (user, device, IP, e-mail, card, bank account), plus
 * fraud labels on entities. Edges are written in the decide transaction,
 * labels by feedback; lookups read a fixed, bounded number of index ranges.
 */
export class GraphRepository {
  private readonly insertEdgeStmt;
  private readonly clearLabelsStmt;
  private readonly labelsOfDecisionStmt;
  private readonly insertLabelStmt;
  private readonly labelledStmt;
  private readonly anyLabelStmt;
  private readonly neighboursStmt;

  constructor(db: Db) {
    this.insertEdgeStmt = db.prepare<[string, string, string, number, string]>(
      "INSERT OR IGNORE INTO graph_edges VALUES (?, ?, ?, ?, ?)",
    );
    this.clearLabelsStmt = db.prepare<[string, string, string]>(
      "DELETE FROM graph_labels WHERE decision_id = ? AND account_id = ? AND environment = ?",
    );
    this.labelsOfDecisionStmt = db
      .prepare<[string, string, string], string>("SELECT entity FROM graph_labels WHERE decision_id = ? AND account_id = ? AND environment = ?")
      .pluck();
    this.insertLabelStmt = db.prepare<[string, string, string, string]>("INSERT OR IGNORE INTO graph_labels VALUES (?, ?, ?, ?)");
    this.anyLabelStmt = db.prepare<[string, string], { one: number }>(
      "SELECT 1 AS one FROM graph_labels WHERE account_id = ? AND environment = ? LIMIT 1",
    );
    this.labelledStmt = db.prepare<[string, string, string], { one: number }>(
      "SELECT 1 AS one FROM graph_labels WHERE account_id = ? AND environment = ? AND entity = ? LIMIT 1",
    );
    // Second hop: the entity's most recent decisions, their other entities, and which of those carry a label.
    // CROSS JOIN fixes the loop order: left to right, each step an index probe. (A plain JOIN let the planner
    // put the tenant's labels outermost, a scan that grows with the graph.)
    this.neighboursStmt = db.prepare<[{ accountId: string; environment: string; entity: string; fanout: number }], { entity: string }>(
      `SELECT DISTINCT l.entity FROM
         (SELECT decision_id FROM graph_edges
           WHERE account_id = @accountId AND environment = @environment AND entity = @entity
           ORDER BY created_at DESC LIMIT @fanout) d
         CROSS JOIN graph_edges n ON n.decision_id = d.decision_id
         CROSS JOIN graph_labels l ON l.account_id = @accountId AND l.environment = @environment AND l.entity = n.entity`,
    );
  }

  /** Links a decision to its entities. Call inside the decide transaction. */
  recordEdges(tenant: Tenant, decisionId: string, entities: readonly string[], at: number): void {
    for (const entity of entities) this.insertEdgeStmt.run(tenant.accountId, tenant.environment, entity, at, decisionId);
  }

  /**
   * Sets the labels a decision gives its entities: fraud labels them all, a
   * legitimate label removes what an earlier label of the same decision set.
   * True when the decision's labels changed (a fraud label repeated changes nothing).
   */
  label(tenant: Tenant, decisionId: string, entities: readonly string[], fraud: boolean): boolean {
    const { accountId, environment } = tenant;
    const before = new Set(this.labelsOfDecisionStmt.all(decisionId, accountId, environment));
    const after = new Set(fraud ? entities : []);
    if (before.size === after.size && [...after].every((entity) => before.has(entity))) return false;
    this.clearLabelsStmt.run(decisionId, accountId, environment);
    for (const entity of after) this.insertLabelStmt.run(accountId, environment, entity, decisionId);
    return true;
  }

  /**
   * Fraud-labelled entities within two hops of `entities` (a request's, before
   * it is recorded). An IP address links at one hop only: everyone behind an
   * office's or a carrier's address shares it, so the second hop neither walks
   * from the request's address nor counts a labelled address it reaches (a
   * customer who once shared an address with a fraudster, seen again from home).
   */
  lookup(tenant: Tenant, entities: readonly string[]): GraphLink {
    const { accountId, environment } = tenant;
    // Until feedback labels something fraud, nothing can be linked to it: one probe instead of the walk.
    if (!this.anyLabelStmt.get(accountId, environment)) return { linkedToFraud: false, hops: null, fraudNeighbours: 0 };
    const labelled = new Set<string>();
    let hops: number | null = null;
    for (const entity of entities) {
      if (this.labelledStmt.get(accountId, environment, entity)) {
        labelled.add(entity);
        hops = 1;
      }
    }
    for (const entity of entities) {
      if (isIpEntityKey(entity)) continue;
      for (const row of this.neighboursStmt.all({ accountId, environment, entity, fanout: GRAPH_FANOUT })) {
        if (labelled.has(row.entity) || isIpEntityKey(row.entity)) continue;
        labelled.add(row.entity);
        hops ??= 2;
      }
    }
    return { linkedToFraud: hops !== null, hops, fraudNeighbours: labelled.size };
  }
}
