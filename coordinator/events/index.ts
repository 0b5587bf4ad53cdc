// Workspace events: the JetStream-backed stream, and the emitter the task
// engine and the deployment service announce changes through.

export { type EmitEvent, taskEvents, WorkspaceEvents } from "./emitter.ts";
export { type EventPosition, formatCursor, parseCursor } from "./batch.ts";
export {
  DEFAULT_EVENTS_BATCH_WINDOW_MS,
  DEFAULT_EVENTS_MAX_AGE_MS,
  DEFAULT_EVENTS_MAX_BYTES,
  EVENTS_STREAM,
  type EventFollow,
  EventStream,
  type EventStreamOptions,
  type EventStreamStats,
  eventBatchSubject,
  type HistoryPage,
  type HistoryQuery,
  parseTypePatterns,
} from "./stream.ts";
export { eventRoutes } from "./routes.ts";
export { CLOUDEVENTS_CONTENT_TYPE, EVENT_TYPES, eventTypeMatches, toCloudEvent } from "./types.ts";
export type { BerthEvent, EventFeed, EventType } from "./types.ts";
export { createEvents, eventsHttpRoutes } from "./area.ts";
export type { EventsDeps } from "./area.ts";
