import type { Db } from "./database.js";
import { newId } from "../ids.js";

export interface Account {
  id: string;
  name: string;
  /** Rate-limit rule name -> calls per window, replacing the contract's default. */
  rateLimitOverrides: Record<string, number>;
  createdAt: number;
}

interface AccountRow {
  id: string;
  name: string;
  rate_limit_overrides: string;
  created_at: number;
}

function toAccount(row: AccountRow): Account {
  return {
    id: row.id,
    name: row.name,
    rateLimitOverrides: JSON.parse(row.rate_limit_overrides) as Record<string, number>,
    createdAt: row.created_at,
  };
}

export class AccountRepository {
  private readonly insertStmt;
  private readonly byIdStmt;
  private readonly listStmt;
  private readonly countStmt;
  private readonly hashKeyStmt;

  constructor(db: Db) {
    this.insertStmt = db.prepare<[string, string, string, number]>(
      "INSERT INTO accounts (id, name, rate_limit_overrides, created_at, hash_key) VALUES (?, ?, ?, ?, randomblob(32))",
    );
    this.byIdStmt = db.prepare<[string], AccountRow>("SELECT * FROM accounts WHERE id = ?");
    this.listStmt = db.prepare<[], AccountRow>("SELECT * FROM accounts ORDER BY created_at, id");
    this.countStmt = db.prepare<[], { n: number }>("SELECT COUNT(*) AS n FROM accounts");
    this.hashKeyStmt = db.prepare<[string], { hash_key: Buffer }>("SELECT hash_key FROM accounts WHERE id = ?");
  }

  create(name: string, rateLimitOverrides: Record<string, number>, now: number): Account {
    const account: Account = { id: newId("acct"), name, rateLimitOverrides, createdAt: now };
    this.insertStmt.run(account.id, name, JSON.stringify(rateLimitOverrides), now);
    return account;
  }

  get(id: string): Account | undefined {
    const row = this.byIdStmt.get(id);
    return row && toAccount(row);
  }

  list(): Account[] {
    return this.listStmt.all().map(toAccount);
  }

  /** The account's secret for keyed hashes (visitor ids); never leaves the server. */
  hashKey(id: string): Buffer | undefined {
    return this.hashKeyStmt.get(id)?.hash_key;
  }

  count(): number {
    return this.countStmt.get()?.n ?? 0;
  }
}
