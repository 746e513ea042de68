import type { AuditActor, AuditFields } from "../audit/entry.js";
import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import { newId } from "../ids.js";
import type { Db } from "../store/database.js";
import type { Tenant } from "../store/tenant.js";
import type { DeliveryMethod, EndpointStatus, StoredEndpoint, WebhookRepository } from "../store/webhooks.js";
import { checkWebhookDestination, type GuardOptions } from "./address-guard.js";
import type { EventType } from "./events.js";
import { generateSigningSecret } from "./signature.js";

/**
 * Endpoints one account and environment may hold. Every event is one delivery task per endpoint that wants
 * it, in the background queue all accounts share: without a bound, one account's endpoints could multiply
 * its decides into a backlog that delays every account's deliveries.
 */
export const MAX_WEBHOOK_ENDPOINTS = 20;

/** An endpoint past {@link MAX_WEBHOOK_ENDPOINTS}: the account must delete one first. */
export class EndpointLimitError extends Error {}

/** Input an endpoint cannot take; `field` is the request field at fault. */
export class EndpointInputError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

export interface NewEndpoint {
  url: string;
  events: EventType[];
  deliveryMethod: DeliveryMethod;
  description: string;
}

/** A change to an endpoint; undefined fields stay as they are. */
export interface EndpointChange {
  url?: string | undefined;
  /** Replaces the event types; an empty list subscribes to all. */
  events?: EventType[] | undefined;
  status?: EndpointStatus | undefined;
  description?: string | undefined;
}

/** An endpoint together with its signing secret, at the only moments the secret is shown. */
export interface EndpointWithSecret {
  endpoint: StoredEndpoint;
  secret: string;
}

/** What the audit log keeps of an endpoint: everything but the secret. */
function auditView(endpoint: StoredEndpoint): AuditFields["data"] {
  return {
    url: endpoint.url,
    events: endpoint.events,
    deliveryMethod: endpoint.deliveryMethod,
    status: endpoint.status,
    description: endpoint.description,
  };
}

/**
 * The updatedAt of a change to `current`: now, but always later than its last one, so that every change moves
 * it, even one in the same millisecond (or after the clock stepped back). A 410 tells by it whether the endpoint
 * changed while the attempt was under way (disableGone).
 */
function laterThan(current: StoredEndpoint, now: number): number {
  return Math.max(now, current.updatedAt + 1);
}

/**
 * Managing webhook endpoints: every change is checked (the SSRF guard on URLs)
 * and written together with its audit entry in one transaction.
 */
/** What a 410 did to its endpoint: disabled it, found it disabled already, deleted, or changed since the attempt. */
export type GoneOutcome = "disabled" | "already-disabled" | "deleted" | "changed";

export class WebhookEndpoints {
  private readonly createTx;
  private readonly updateTx;
  private readonly deleteTx;
  private readonly disableTx;
  private readonly rotateTx;

  constructor(
    db: Db,
    private readonly endpoints: WebhookRepository,
    private readonly audit: AuditTrail,
    private readonly clock: Clock,
    private readonly guard: GuardOptions,
  ) {
    const entry = (tenant: Tenant, actor: AuditActor, action: AuditFields["action"], endpoint: StoredEndpoint, data: AuditFields["data"]) =>
      this.audit.record({ accountId: tenant.accountId, environment: tenant.environment, actor, action, subject: endpoint.id, data });

    this.createTx = db.transaction((tenant: Tenant, actor: AuditActor, endpoint: StoredEndpoint) => {
      // Counted inside the write's transaction, so two creations at once cannot both pass.
      if (this.endpoints.count(tenant) >= MAX_WEBHOOK_ENDPOINTS) {
        throw new EndpointLimitError(`this account and environment already hold ${MAX_WEBHOOK_ENDPOINTS} webhook endpoints, the most allowed; delete one first`);
      }
      this.endpoints.insert(tenant, endpoint);
      entry(tenant, actor, "webhook.created", endpoint, auditView(endpoint));
    });
    this.updateTx = db.transaction((tenant: Tenant, actor: AuditActor, id: string, change: EndpointChange): StoredEndpoint | undefined => {
      const current = this.endpoints.get(tenant, id);
      if (!current) return undefined;
      const updated: StoredEndpoint = {
        ...current,
        url: change.url ?? current.url,
        events: change.events ?? current.events,
        status: change.status ?? current.status,
        description: change.description ?? current.description,
        updatedAt: laterThan(current, this.clock.now()),
      };
      this.endpoints.save(tenant, updated);
      // A 410 disables an endpoint on the service's own initiative; the audit log tells the two apart.
      const action = actor === "system" && change.status === "disabled" ? "webhook.disabled" : "webhook.updated";
      entry(tenant, actor, action, updated, { before: auditView(current), after: auditView(updated) });
      return updated;
    });
    this.disableTx = db.transaction((tenant: Tenant, attempted: StoredEndpoint): GoneOutcome => {
      const current = this.endpoints.get(tenant, attempted.id);
      if (!current) return "deleted";
      if (current.status !== "enabled") return "already-disabled";
      // Changed since the attempt read it (moved to another URL, re-enabled, its secret rotated): the 410 may
      // speak for an address it no longer uses, and the delivery is tried again as it is now.
      // updatedAt moves on every change (laterThan), even one made in the millisecond the attempt read it in.
      if (current.updatedAt !== attempted.updatedAt || current.url !== attempted.url || current.secret !== attempted.secret) return "changed";
      this.updateTx(tenant, "system", attempted.id, { status: "disabled" });
      return "disabled";
    });
    this.deleteTx = db.transaction((tenant: Tenant, actor: AuditActor, id: string): boolean => {
      const current = this.endpoints.get(tenant, id);
      if (!current || !this.endpoints.delete(tenant, id)) return false;
      entry(tenant, actor, "webhook.deleted", current, auditView(current));
      return true;
    });
    this.rotateTx = db.transaction((tenant: Tenant, actor: AuditActor, id: string): EndpointWithSecret | undefined => {
      const current = this.endpoints.get(tenant, id);
      if (!current) return undefined;
      const secret = generateSigningSecret();
      const updated: StoredEndpoint = { ...current, secret, updatedAt: laterThan(current, this.clock.now()) };
      this.endpoints.save(tenant, updated);
      entry(tenant, actor, "webhook.updated", updated, { secretRotated: true });
      return { endpoint: updated, secret };
    });
  }

  list(tenant: Tenant): StoredEndpoint[] {
    return this.endpoints.list(tenant);
  }

  get(tenant: Tenant, id: string): StoredEndpoint | undefined {
    return this.endpoints.get(tenant, id);
  }

  async create(tenant: Tenant, actor: AuditActor, input: NewEndpoint): Promise<EndpointWithSecret> {
    await this.checkUrl(input.deliveryMethod, input.url);
    const now = this.clock.now();
    const secret = generateSigningSecret();
    const endpoint: StoredEndpoint = {
      id: newId("whe"),
      deliveryMethod: input.deliveryMethod,
      url: input.url,
      events: [...new Set(input.events)],
      status: "enabled",
      description: input.description,
      secret,
      createdAt: now,
      updatedAt: now,
    };
    this.createTx.immediate(tenant, actor, endpoint);
    return { endpoint, secret };
  }

  /** Applies a change; undefined when the endpoint does not exist for this tenant. */
  async update(tenant: Tenant, actor: AuditActor, id: string, change: EndpointChange): Promise<StoredEndpoint | undefined> {
    if (change.url !== undefined) {
      const current = this.endpoints.get(tenant, id);
      if (!current) return undefined;
      await this.checkUrl(current.deliveryMethod, change.url);
    }
    const events = change.events && [...new Set(change.events)];
    return this.updateTx.immediate(tenant, actor, id, { ...change, events });
  }

  /** False when the endpoint does not exist for this tenant. */
  delete(tenant: Tenant, actor: AuditActor, id: string): boolean {
    return this.deleteTx.immediate(tenant, actor, id);
  }

  /** Replaces the signing secret at once: every later attempt, retries included, is signed with the new one. */
  rotateSecret(tenant: Tenant, actor: AuditActor, id: string): EndpointWithSecret | undefined {
    return this.rotateTx.immediate(tenant, actor, id);
  }

  /**
   * Stops deliveries to an endpoint that answered 410 Gone, as `attempted` (the endpoint as the delivery read
   * it) was. Several deliveries in flight can get their 410 at once: only the first disables it (and is
   * audited). An endpoint changed since is left as it is.
   */
  disableGone(tenant: Tenant, attempted: StoredEndpoint): GoneOutcome {
    return this.disableTx.immediate(tenant, attempted);
  }

  /** http endpoints need a URL the SSRF guard accepts (resolved now; checked again on every connection); websocket ones have none. */
  private async checkUrl(method: DeliveryMethod, url: string): Promise<void> {
    if (method === "websocket") {
      if (url !== "") throw new EndpointInputError("url", "websocket endpoints have no URL: clients connect to the event stream");
      return;
    }
    if (url === "") throw new EndpointInputError("url", "http endpoints need a URL");
    const problem = await checkWebhookDestination(url, this.guard);
    if (problem !== undefined) throw new EndpointInputError("url", `${problem.message} (${problem.code})`);
  }
}
