// A real nats-server, a real SQLite store, the event stream, a task service
// whose status changes are emitted as events, and the event routes on a
// listening Fastify app.

import Fastify, { type FastifyInstance } from "fastify";
import { connect, type NatsConnection } from "nats";
import pino from "pino";
import { EventStream, taskEvents, WorkspaceEvents } from "../../coordinator/events/index.ts";
import { installErrorHandlers } from "../../coordinator/http/errors.ts";
import { eventRoutes } from "../../coordinator/http/routes/events.ts";
import { Objects } from "../../coordinator/objects/objects.ts";
import { Store } from "../../coordinator/store/store.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { TaskService } from "../../coordinator/tasks/service.ts";
import type { BerthEvent } from "../../shared/events.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { type TaskEvent, taskEventSubject } from "../../shared/tasks.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestNats, type TestNats } from "../helpers/nats.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

export interface EventHarness {
  nats: TestNats;
  store: Store;
  nc: NatsConnection;
  stream: EventStream;
  emitter: WorkspaceEvents;
  tasks: TaskService;
  app: FastifyInstance;
  baseUrl: string;
  ws: Workspace;
  other: Workspace;
  token: string;
  otherToken: string;
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
  const cleanups: (() => unknown)[] = [];
  suite.after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  const nats = await startTestNats(later);
  const dir = tempDir(later);
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  cleanups.push(() => store.close());
  const creds = { servers: nats.url, user: nats.coordinator.user, pass: nats.coordinator.password };
  const nc = await connect(creds);
  cleanups.push(() => closeNats(nc));
  const log = pino({ level: "silent" });
  const stream = new EventStream({ nats: nc, log });
  await stream.start();
  cleanups.push(() => stream.stop());
  const emitter = new WorkspaceEvents(stream, store.workspaces, log);
  const tasks = new TaskService({
    store,
    nats: nc,
    objects: new Objects(store.objects, dir),
    log,
    onTaskStatus: taskEvents(emitter.emit),
  });
  await tasks.start();
  cleanups.push(() => tasks.stop());
  const agentNc = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
  cleanups.push(() => closeNats(agentNc));

  const app = Fastify({ logger: false });
  app.decorateRequest("principal", null);
  installErrorHandlers(app);
  await app.register(
    eventRoutes({ tokens: store.tokens, events: stream, ...(o.heartbeatMs ? { heartbeatMs: o.heartbeatMs } : {}) }),
  );
  await app.listen({ host: "127.0.0.1", port: 0 });
  cleanups.push(() => app.close());
  const addr = app.server.address();
  const baseUrl = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;

  const ws = await store.workspaces.create("events-main");
  const other = await store.workspaces.create("events-other");
  const token = (await store.tokens.create(ws.id, { name: "user" })).secret;
  const otherToken = (await store.tokens.create(other.id, { name: "user" })).secret;
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
    ws,
    other,
    token,
    otherToken,
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
      const nc2 = await connect(creds);
      cleanups.push(() => closeNats(nc2));
      const s = new EventStream({ nats: nc2, log });
      await s.start();
      cleanups.push(() => s.stop());
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

/** Waits (polling, bounded) until `ok` holds; fails naming `what`. */
export async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
