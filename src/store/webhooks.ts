import type { EventType } from "../webhooks/events.js";
import type { Db } from "./database.js";
import type { Tenant } from "./tenant.js";

export type DeliveryMethod = "http" | "websocket";
export type EndpointStatus = "enabled" | "disabled";

export interface StoredEndpoint {
  id: string;
  deliveryMethod: DeliveryMethod;
  /** Empty for websocket endpoints. */
  url: string;
  /** Event types delivered; empty means all. */
  events: EventType[];
  status: EndpointStatus;
  description: string;
  /** The signing secret itself; never leaves the service except once, when created or rotated. */
  secret: string;
  createdAt: number;
  updatedAt: number;
}

interface EndpointRow {
  id: string;
  delivery_method: DeliveryMethod;
  url: string;
  events: string;
  status: EndpointStatus;
  description: string;
  secret: string;
  created_at: number;
  updated_at: number;
}

function toEndpoint(row: EndpointRow): StoredEndpoint {
  return {
    id: row.id,
    deliveryMethod: row.delivery_method,
    url: row.url,
    events: JSON.parse(row.events) as EventType[],
    status: row.status,
    description: row.description,
    secret: row.secret,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** Whether an endpoint wants events of this type (an empty list subscribes to all). */
function subscribes(endpoint: StoredEndpoint, type: EventType): boolean {
  return endpoint.events.length === 0 || endpoint.events.includes(type);
}

/** Webhook endpoints, scoped by account and environment like every tenant table. */
export class WebhookRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly listStmt;
  private readonly enabledStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly countStmt;
  /**
   * Enabled endpoints per tenant and delivery method. Every decision asks
   * whether anyone wants its event; endpoints change only through this
   * repository, which drops a tenant's entries whenever it writes them.
   */
  private readonly enabledCache = new Map<string, StoredEndpoint[]>();

  constructor(db: Db) {
    this.insertStmt = db.prepare(
      `INSERT INTO webhook_endpoints (id, account_id, environment, delivery_method, url, events, status, description, secret, created_at, updated_at)
       VALUES (@id, @accountId, @environment, @deliveryMethod, @url, @events, @status, @description, @secret, @createdAt, @updatedAt)`,
    );
    this.getStmt = db.prepare<[string, string, string], EndpointRow>(
      "SELECT * FROM webhook_endpoints WHERE id = ? AND account_id = ? AND environment = ?",
    );
    this.listStmt = db.prepare<[string, string], EndpointRow>(
      "SELECT * FROM webhook_endpoints WHERE account_id = ? AND environment = ? ORDER BY created_at, id",
    );
    this.enabledStmt = db.prepare<[string, string, DeliveryMethod], EndpointRow>(
      "SELECT * FROM webhook_endpoints WHERE account_id = ? AND environment = ? AND delivery_method = ? AND status = 'enabled' ORDER BY created_at, id",
    );
    this.updateStmt = db.prepare(
      `UPDATE webhook_endpoints SET url = @url, events = @events, status = @status, description = @description, secret = @secret, updated_at = @updatedAt
       WHERE id = @id AND account_id = @accountId AND environment = @environment`,
    );
    this.deleteStmt = db.prepare<[string, string, string]>(
      "DELETE FROM webhook_endpoints WHERE id = ? AND account_id = ? AND environment = ?",
    );
    this.countStmt = db.prepare<[string, string], { n: number }>("SELECT COUNT(*) AS n FROM webhook_endpoints WHERE account_id = ? AND environment = ?");
  }

  /** How many endpoints the tenant holds, enabled or not. */
  count(tenant: Tenant): number {
    return this.countStmt.get(tenant.accountId, tenant.environment)?.n ?? 0;
  }

  insert(tenant: Tenant, endpoint: StoredEndpoint): void {
    this.forget(tenant);
    this.insertStmt.run({ ...tenant, ...endpoint, events: JSON.stringify(endpoint.events) });
  }

  get(tenant: Tenant, id: string): StoredEndpoint | undefined {
    const row = this.getStmt.get(id, tenant.accountId, tenant.environment);
    return row && toEndpoint(row);
  }

  /** Oldest first. */
  list(tenant: Tenant): StoredEndpoint[] {
    return this.listStmt.all(tenant.accountId, tenant.environment).map(toEndpoint);
  }

  /** Enabled endpoints of one delivery method that want events of this type. */
  subscribers(tenant: Tenant, method: DeliveryMethod, type: EventType): StoredEndpoint[] {
    const key = `${tenant.accountId}/${tenant.environment}/${method}`;
    let enabled = this.enabledCache.get(key);
    if (!enabled) {
      enabled = this.enabledStmt.all(tenant.accountId, tenant.environment, method).map(toEndpoint);
      this.enabledCache.set(key, enabled);
    }
    return enabled.filter((endpoint) => subscribes(endpoint, type));
  }

  save(tenant: Tenant, endpoint: StoredEndpoint): void {
    this.forget(tenant);
    this.updateStmt.run({ ...tenant, ...endpoint, events: JSON.stringify(endpoint.events) });
  }

  /** False when there was no such endpoint for the tenant. */
  delete(tenant: Tenant, id: string): boolean {
    this.forget(tenant);
    return this.deleteStmt.run(id, tenant.accountId, tenant.environment).changes === 1;
  }

  private forget(tenant: Tenant): void {
    for (const method of ["http", "websocket"] as const) this.enabledCache.delete(`${tenant.accountId}/${tenant.environment}/${method}`);
  }
}
