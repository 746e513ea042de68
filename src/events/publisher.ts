import type { Clock } from "../clock.js";
import type { Outbox, OutboxTask, TaskOutcome } from "../outbox/outbox.js";
import type { Tenant } from "../store/tenant.js";
import { buildEvent, serializeEvent, type EventDataByType, type EventType, type WebhookEvent } from "../webhooks/events.js";

/** Outbox task kind of a published event. */
export const EVENT_TASK = "event";

/** Receives every published event once it is out of the transaction that caused it. */
export type EventSink = (tenant: Tenant, event: WebhookEvent, body: string) => void | Promise<void>;

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

  /** Call inside the transaction of the change the event reports. */
  publish<T extends EventType>(tenant: Tenant, type: T, data: EventDataByType[T]): WebhookEvent<T> {
    const event = buildEvent(type, data, tenant, this.clock);
    // Serialised once: every delivery and retry carries the identical, signed bytes.
    this.outbox.enqueue(EVENT_TASK, tenant, { body: serializeEvent(event) });
    return event;
  }

  private async dispatch(task: OutboxTask): Promise<TaskOutcome> {
    if (!task.tenant) return { kind: "dead", error: "event without a tenant" };
    const { body } = task.payload as { body: string };
    const event = JSON.parse(body) as WebhookEvent;
    for (const sink of this.sinks) await sink(task.tenant, event, body);
    return { kind: "done" };
  }
}
