// A real nats-server, a real SQLite store, the event stream, a task service
// whose status changes are emitted as events, and the event routes on a
// listening Fastify app.

import type { NatsConnection } from "nats";
import pino from "pino";
import { EventStream, taskEvents, WorkspaceEvents } from "../../coordinator/events/index.ts";
import { eventRoutes } from "../../coordinator/events/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { Objects } from "../../coordinator/objects/objects.ts";
import { TaskService } from "../../coordinator/tasks/service.ts";
import type { BerthEvent } from "../../coordinator/events/types.ts";
import { type TaskEvent, taskEventSubject } from "../../shared/tasks.ts";
import { listenRoutes, type RoutesOnNats, startNatsStore, twoWorkspaces } from "../helpers/nats-store.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

export interface EventHarness extends RoutesOnNats {
  nc: NatsConnection;
  stream: EventStream;
  emitter: WorkspaceEvents;
  tasks: TaskService;
  stubId: string;
  /** Publishes a task event as an agent would. */
  agentEvent(ev: Partial<TaskEvent> & Pick<TaskEvent, "type" | "taskId">): Promise<void>;
  /** A second connection and stream, as another coordinator would have. */
  secondStream(): Promise<EventStream>;
  /** Collects every event the live feed delivers. */
  collect(): Promise<{ events: BerthEvent[]; stop: () => void }>;
}

export async function startEventHarness(
  suite: { after: (fn: () => unknown) => void },
  o: { heartbeatMs?: number } = {},
): Promise<EventHarness> {
  const { nats, dir, store, nc, agentNc, defer, connectCoordinator } = await startNatsStore(suite);
  const log = pino({ level: "silent" });
  const stream = new EventStream({ nats: nc, log });
  await stream.start();
  defer(() => stream.stop());
  const emitter = new WorkspaceEvents(stream, store.workspaces, log);
  const tasks = new TaskService({
    store,
    nats: nc,
    objects: new Objects(store.objects, dir),
    log,
    onTaskStatus: taskEvents(emitter.emit),
  });
  await tasks.start();
  defer(() => tasks.stop());
  const { app, baseUrl } = await listenRoutes(defer, (app) =>
    app.register(
      tokenScope(
        store.tokens,
        eventRoutes({ events: stream, ...(o.heartbeatMs ? { heartbeatMs: o.heartbeatMs } : {}) }),
      ),
    ),
  );
  const workspaces = await twoWorkspaces(store, "events");
  const { ws } = workspaces;
  const { stub } = await tasks.upsertStub(ws.id, {
    name: "square",
    type: "function",
    config: stubConfig(),
    extra: stubExtra(),
  });
  const ajs = agentNc.jetstream();
  const enc = new TextEncoder();

  return {
    nats,
    store,
    nc,
    stream,
    emitter,
    tasks,
    app,
    baseUrl,
    ...workspaces,
    stubId: stub.id,
    async agentEvent(ev) {
      const full = {
        stubId: stub.id,
        workspaceId: ws.id,
        agentId: "agent-1",
        containerId: "ctr-1",
        attempt: 1,
        at: Date.now(),
        ...ev,
      } as TaskEvent;
      await ajs.publish(taskEventSubject(full.agentId, full.taskId), enc.encode(JSON.stringify(full)));
    },
    async secondStream() {
      const s = new EventStream({ nats: await connectCoordinator(), log });
      await s.start();
      defer(() => s.stop());
      return s;
    },
    async collect() {
      const events: BerthEvent[] = [];
      const stop = stream.subscribe((ev) => events.push(ev));
      await stream.liveReady();
      return { events, stop };
    },
  };
}
