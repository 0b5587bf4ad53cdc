// The events area (docs/events.md): the workspace event stream, the emitter the other areas call, and its routes.
import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import type { Area, AreaRoutes } from "../http/index.ts";
import type { WorkspaceRepo } from "../store/index.ts";
import { WorkspaceEvents } from "./emitter.ts";
import { eventRoutes } from "./routes.ts";
import { EventStream } from "./stream.ts";

export function eventsHttpRoutes(stream: EventStream): AreaRoutes {
  return { api: [eventRoutes({ events: stream })] };
}

export interface EventsDeps {
  nats: NatsConnection;
  workspaces: Pick<WorkspaceRepo, "get">;
  log: Logger;
  maxAgeMs?: number;
  maxBytes?: number;
}

export function createEvents(d: EventsDeps): Area<{ stream: EventStream; workspace: WorkspaceEvents }> {
  const stream = new EventStream({
    nats: d.nats,
    log: d.log,
    ...(d.maxAgeMs ? { maxAgeMs: d.maxAgeMs } : {}),
    ...(d.maxBytes ? { maxBytes: d.maxBytes } : {}),
  });
  const workspace = new WorkspaceEvents(stream, d.workspaces, d.log);
  return {
    service: { stream, workspace },
    routes: eventsHttpRoutes(stream),
    start: () => stream.start(),
    stop: () => stream.stop(),
  };
}
