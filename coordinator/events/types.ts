// Workspace events: what changed, for the events history and
// stream routes and for webhook deliveries. Every event is a CloudEvent 1.0;
// `toCloudEvent` gives the JSON consumers receive.

/** Every event type berth emits; docs/events.md describes each. */
export const EVENT_TYPES = [
  "stub.deploy",
  "deployment.start",
  "deployment.stop",
  "deployment.delete",
  "deployment.scale",
  "task.created",
  "task.running",
  "task.retry",
  "task.complete",
  "task.failed",
  "task.timeout",
  "task.cancelled",
  "task.expired",
  "sandbox.waiting",
  "image.building",
  "image.ready",
  "image.failed",
  "gpu.drained",
  "gpu.restored",
  "webhook.test",
  "audit.change",
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export interface BerthEvent {
  /** `evt-...` (shared/ids.ts newId("evt")); unique, the CloudEvent id and X-Service-Delivery. */
  id: string;
  type: EventType;
  /** Internal workspace id: scopes the event; never sent to consumers. */
  workspaceId: string;
  /** The workspace's external id, for `source`. */
  workspaceExternalId: string;
  /** What the event is about: a task id, a deployment id, a webhook id. */
  subject: string;
  /** ISO 8601. */
  time: string;
  data: Record<string, unknown>;
}

/** Publishes events (the coordinator's event stream). Never throws; never blocks the caller. */
export interface EventSink {
  publish(ev: Omit<BerthEvent, "id" | "time"> & { time?: string }): void;
}

/** Events as they are stored, live. Returns an unsubscribe. */
export interface EventFeed {
  subscribe(fn: (ev: BerthEvent) => void): () => void;
}

export const CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json";

/** The CloudEvents 1.0 structured-mode JSON of an event. */
export function toCloudEvent(ev: BerthEvent): Record<string, unknown> {
  return {
    specversion: "1.0",
    id: ev.id,
    source: `/workspaces/${ev.workspaceExternalId}`,
    type: ev.type,
    subject: ev.subject,
    time: ev.time,
    datacontenttype: "application/json",
    data: ev.data,
  };
}

/** Whether a subscription's `event_types` take this type (spec: exact, `prefix.*`, `*` or empty = all). */
export function eventTypeMatches(patterns: readonly string[], type: string): boolean {
  if (patterns.length === 0) return true;
  return patterns.some(
    (p) => p === "*" || p === type || (p.endsWith(".*") && type.startsWith(p.slice(0, -1))),
  );
}
