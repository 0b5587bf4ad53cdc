// A task service over a real nats-server and a real SQLite store, with an
// "agent" connection that publishes task events the way agents do.

import type { FastifyInstance } from "fastify";
import type { NatsConnection } from "nats";
import pino from "pino";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { buildHttpApp } from "../../coordinator/edge/app.ts";
import type { DashboardOptions } from "../../coordinator/dashboard/index.ts";
import { type AgentRevoker, fleetHttpRoutes } from "../../coordinator/fleet/index.ts";
import { type FunctionsDeps, functionsHttpRoutes } from "../../coordinator/functions/index.ts";
import type { AreaRoutes } from "../../coordinator/http/index.ts";
import { metricsHttpRoutes } from "../../coordinator/metrics/index.ts";
import { objectsHttpRoutes } from "../../coordinator/objects/index.ts";
import { type AuditTrail, workspacesHttpRoutes } from "../../coordinator/workspaces/index.ts";
import { Objects } from "../../coordinator/objects/objects.ts";
import type { Store } from "../../coordinator/records.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import type { ContainerCounts } from "../../coordinator/tasks/activity.ts";
import type { DirectTaskInfo, DirectTaskOptions, DirectTasks } from "../../coordinator/tasks/direct.ts";
import type { StubRecord } from "../../coordinator/tasks/stub-store.ts";
import type { AgentStates } from "../../coordinator/tasks/lost-agents.ts";
import { TaskService, type TaskServiceDeps } from "../../coordinator/tasks/service.ts";
import {
  type TaskEvent,
  type TaskOutputMessage,
  taskEventSubject,
  taskOutputSubject,
} from "../../shared/tasks.ts";
import { storeJoinService } from "../helpers/join.ts";
import { startNatsStore } from "../helpers/nats-store.ts";
import type { TestNats } from "../helpers/nats.ts";
import { stubConfig, stubExtra } from "./fixtures.ts";

export { stubConfig, stubExtra } from "./fixtures.ts";

/** Registers a function stub `name` (the fixtures' config) in the harness's workspace; its id. */
export async function functionStubId(h: TaskHarness, name: string): Promise<string> {
  return (
    await h.tasks.upsertStub(h.ws.id, { name, type: "function", config: stubConfig(), extra: stubExtra() })
  ).stub.id;
}

export interface TaskHarness {
  nats: TestNats;
  store: Store;
  objects: Objects;
  tasks: TaskService;
  /** Connected as the coordinator (JetStream inspection). */
  nc: NatsConnection;
  /** Connected with the agents' credentials. */
  agentNc: NatsConnection;
  ws: Workspace;
  otherWs: Workspace;
  counts: Map<string, number>;
  dataDir: string;
  /** Publishes a task event as agent `agent-1` would. */
  event(ev: Partial<TaskEvent> & Pick<TaskEvent, "type" | "taskId">): Promise<void>;
  output(taskId: string, stream: "stdout" | "stderr", data: string): void;
  /** Another task service on the same store and NATS (another coordinator), with `more` of its deps. */
  newService(more?: Partial<TaskServiceDeps>): TaskService;
}

/** A direct task of `stub`, recorded at once (as the dispatcher records a request that must wait). */
export function recordDirectTask(
  direct: Pick<DirectTasks, "prepare" | "record">,
  stub: StubRecord,
  o: DirectTaskOptions = {},
): DirectTaskInfo {
  const info = direct.prepare(stub);
  direct.record(stub, info, o);
  return info;
}

export async function startTaskHarness(
  suite: { after: (fn: () => unknown) => void },
  o: {
    directFoldMs?: number;
    agents?: AgentStates;
    lostTaskAfterMs?: number;
    directOrphans?: TaskServiceDeps["directOrphans"];
    budgets?: TaskServiceDeps["budgets"];
    catchUp?: TaskServiceDeps["catchUp"];
  } = {},
): Promise<TaskHarness> {
  const { nats, dir: dataDir, store, nc, agentNc, defer } = await startNatsStore(suite);
  const objects = new Objects(store.objects, dataDir);
  const counts = new Map<string, number>();
  const containerCounts: ContainerCounts = { activeContainers: (stubId) => counts.get(stubId) ?? 0 };
  const log = pino({ level: "silent" });
  const newService = (more: Partial<TaskServiceDeps> = {}) =>
    new TaskService({
      store,
      nats: nc,
      objects,
      counts: containerCounts,
      log,
      sweepIntervalMs: 50,
      ...(o.directFoldMs !== undefined ? { directFoldMs: o.directFoldMs } : {}),
      ...(o.agents ? { agents: o.agents } : {}),
      ...(o.lostTaskAfterMs !== undefined ? { lostTaskAfterMs: o.lostTaskAfterMs } : {}),
      ...(o.directOrphans ? { directOrphans: o.directOrphans } : {}),
      ...(o.budgets ? { budgets: o.budgets } : {}),
      ...(o.catchUp ? { catchUp: o.catchUp } : {}),
      ...more,
    });
  const tasks = newService();
  await tasks.start();
  defer(() => tasks.stop());
  const ws = await store.workspaces.create("tasks-main");
  const otherWs = await store.workspaces.create("tasks-other");
  const js = agentNc.jetstream();
  const enc = new TextEncoder();
  return {
    nats,
    store,
    objects,
    tasks,
    nc,
    agentNc,
    ws,
    otherWs,
    counts,
    dataDir,
    newService,
    async event(ev) {
      const full = {
        stubId: "",
        workspaceId: ws.id,
        agentId: "agent-1",
        containerId: "ctr-1",
        attempt: 1,
        at: Date.now(),
        ...ev,
      } as TaskEvent;
      await js.publish(taskEventSubject(full.agentId, full.taskId), enc.encode(JSON.stringify(full)));
    },
    output(taskId, stream, data) {
      const m: TaskOutputMessage = { taskId, stream, data, at: Date.now() };
      agentNc.publish(taskOutputSubject("agent-1", taskId), enc.encode(JSON.stringify(m)));
    },
  };
}

/** What buildTaskApp mounts beside the harness's own areas. */
export interface TaskAppOptions {
  /** More of the functions area's sources: with `deployments`, the deploy and task-queue routes too. */
  functions?: Partial<Omit<FunctionsDeps, "tokens" | "tasks" | "taskRows">>;
  /** Other areas' routes (the same builders main.ts's areas use). */
  areas?: { routes: AreaRoutes }[];
  /** The fleet routes' view, and `berth agent revoke`'s route with a revoker. @default an empty view, no revoke route */
  fleet?: { view: FleetView; revoker?: AgentRevoker };
  dashboard?: DashboardOptions;
  endpointDomain?: string;
  /** The audit trail: its route is served and the API's changes are recorded in it. @default none */
  audit?: AuditTrail;
}

/**
 * The coordinator's HTTP app over the harness's store and task service: the
 * fleet, workspaces, metrics, objects and functions areas' routes (plus
 * `o.areas`), not listening yet.
 */
export async function buildTaskApp(h: TaskHarness, o: TaskAppOptions = {}): Promise<FastifyInstance> {
  const own: { routes: AreaRoutes }[] = [
    {
      routes: fleetHttpRoutes({
        store: h.store,
        view: o.fleet?.view ?? new FleetView(),
        join: await storeJoinService(h.store, h.nats.url),
        ...(o.fleet?.revoker ? { revoker: o.fleet.revoker } : {}),
      }),
    },
    {
      routes: workspacesHttpRoutes(
        o.audit ? { workspaces: h.store.workspaces, tokens: h.store.tokens, audit: o.audit } : h.store,
      ),
    },
    { routes: metricsHttpRoutes({ metrics: h.store.metrics, stubs: h.store.stubs }) },
    { routes: objectsHttpRoutes(h.objects) },
    {
      routes: functionsHttpRoutes({
        tokens: h.store.tokens,
        tasks: h.tasks,
        taskRows: h.store.tasks,
        ...o.functions,
      }),
    },
  ];
  return buildHttpApp({
    areas: [...own, ...(o.areas ?? [])],
    tokens: h.store.tokens,
    ...(o.audit ? { audit: o.audit } : {}),
    ...(o.endpointDomain ? { endpointDomain: o.endpointDomain } : {}),
    ...(o.dashboard ? { dashboard: o.dashboard } : {}),
    logger: false,
    version: "test",
  });
}

/** buildTaskApp, listening on a loopback port. */
export async function startTaskApp(h: TaskHarness, cleanups: (() => unknown)[]): Promise<FastifyInstance> {
  const app = await buildTaskApp(h);
  cleanups.unshift(() => app.close());
  await app.listen({ host: "127.0.0.1", port: 0 });
  return app;
}
