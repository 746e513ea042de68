import type { Clock } from "../clock.js";
import type { Outbox, OutboxTask, TaskOutcome } from "../outbox/outbox.js";
import type { Tenant } from "../store/tenant.js";
import { buildEvent, serializeEvent, type EventDataByType, type EventType, type WebhookEvent } from "../webhooks/events.js";

/** Outbox task kind of a published event. */
export const EVENT_TASK = "event";

/** A destination of events: webhook fan-out, WebSocket streams. */
export interface EventSink {
  /** Whether it would deliver an event of this type for the tenant now; asked on every publish, so cheap. */
  wants(tenant: Tenant, type: EventType): boolean;
  /**
   * Receives the event once it is out of the transaction that caused it: inside the transaction that removes
   * the event's task, so what a sink writes (delivery tasks) is committed exactly once.
   */
  deliver(tenant: Tenant, event: WebhookEvent, body: string): void;
}

/**
 * Events (part 6) are published through the outbox, inside the transaction of
 * the change they report, so an event exists exactly when its change does.
 * Sinks (webhook fan-out, WebSocket streams) receive them afterwards.
 */
export class EventPublisher {
  private readonly sinks: EventSink[] = [];

  constructor(
    private readonly outbox: Outbox,
    private readonly clock: Clock,
  ) {
    outbox.register(EVENT_TASK, (task) => this.dispatch(task));
  }

  addSink(sink: EventSink): void {
    this.sinks.push(sink);
  }

  /**
   * Call inside the transaction of the change the event reports. An event no
   * sink wants (no endpoint subscribed, no stream open) is not queued at all:
   * there is no one to deliver it to, now or later.
   */
  publish<T extends EventType>(tenant: Tenant, type: T, data: EventDataByType[T]): void {
    if (!this.sinks.some((sink) => sink.wants(tenant, type))) return;
    const event = buildEvent(type, data, tenant, this.clock);
    // Serialised once: every delivery and retry carries the identical, signed bytes.
    this.outbox.enqueue(EVENT_TASK, tenant, { body: serializeEvent(event) });
  }

  private async dispatch(task: OutboxTask): Promise<TaskOutcome> {
    if (!task.tenant) return { kind: "dead", error: "event without a tenant" };
    const { body } = task.payload as { body: string };
    const event = JSON.parse(body) as WebhookEvent;
    const tenant = task.tenant;
    return this.outbox.finishWith(task, () => {
      for (const sink of this.sinks) sink.deliver(tenant, event, body);
    });
  }
}
