import type { Db } from "./database.js";

/** One-time repairs of data an earlier release got wrong, by name (migration 13): each is done once per database. */
export class RepairLog {
  private readonly doneStmt;
  private readonly markStmt;

  constructor(db: Db) {
    this.doneStmt = db.prepare<[string], { one: number }>("SELECT 1 AS one FROM repairs_done WHERE name = ?");
    this.markStmt = db.prepare<[string, number]>("INSERT INTO repairs_done (name, done_at) VALUES (?, ?)");
  }

  done(name: string): boolean {
    return this.doneStmt.get(name) !== undefined;
  }

  /** Call in the transaction of the repair itself. */
  markDone(name: string, at: number): void {
    this.markStmt.run(name, at);
  }
}
