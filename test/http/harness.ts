// The coordinator's whole HTTP app (buildHttpApp) over a real SQLite store, a
// real nats-server and the real task, deployment, event, webhook and secret
// services, with two workspaces: A (seeded with one object of each kind) and
// B. Containers come from a real ContainerTable, the container manager's own
// record of what runs where (no agent is started here).

import { createHash } from "node:crypto";
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { ContainerTable } from "../../coordinator/containers/container-table.ts";
import type { DeploymentService } from "../../coordinator/deployments/service.ts";
import { deploymentsHttpRoutes } from "../../coordinator/deployments/index.ts";
import { EventStream, eventsHttpRoutes } from "../../coordinator/events/index.ts";
import type { AreaRoutes } from "../../coordinator/http/index.ts";
import { LogQuery, logsHttpRoutes } from "../../coordinator/logs/index.ts";
import {
  containerRoutes,
  type SandboxService,
  sandboxesHttpRoutes,
} from "../../coordinator/sandboxes/index.ts";
import type { OutputStore } from "../../coordinator/outputs/index.ts";
import { secretsHttpRoutes } from "../../coordinator/secrets/index.ts";
import { stateHttpRoutes } from "../../coordinator/state/index.ts";
import { webhooksHttpRoutes } from "../../coordinator/webhooks/index.ts";
import { createUsage } from "../../coordinator/usage/index.ts";
import { AuditTrail } from "../../coordinator/workspaces/index.ts";
import { MapStore } from "../../coordinator/state/maps.ts";
import { QueueStore } from "../../coordinator/state/queues.ts";
import { SignalStore } from "../../coordinator/state/signals.ts";
import { StateObjects } from "../../coordinator/state/state.ts";
import { SecretService } from "../../coordinator/secrets/index.ts";
import type { DeploymentRecord } from "../../coordinator/deployments/store.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import type { CostRates } from "../../coordinator/tasks/cost.ts";
import { BerthError } from "../../shared/errors.ts";
import { deployInput, deploymentService } from "../deployments/helpers.ts";
import {
  buildTaskApp,
  type TaskAppOptions,
  startTaskHarness,
  stubConfig,
  stubExtra,
  type TaskHarness,
} from "../tasks/harness.ts";
import { randomKey, webhookSystem } from "../webhooks/helpers.ts";
import { tempDir } from "../helpers/env.ts";
import { teardownStack } from "../helpers/suite.ts";

export interface HttpHarness {
  h: TaskHarness;
  app: FastifyInstance;
  /** The workspace event stream (the audit trail publishes into it). */
  events: EventStream;
  /** The audit trail the app records its changes in. */
  audit: AuditTrail;
  deployments: DeploymentService;
  containers: ContainerTable;
  a: Workspace;
  b: Workspace;
  tokenA: string;
  tokenB: string;
  /** Ids of A's objects, by the path parameter names the routes use. */
  seeded: {
    deployment: DeploymentRecord;
    stubId: string;
    taskId: string;
    webhookId: string;
    secretName: string;
    tokenId: string;
    objectSha256: string;
    containerId: string;
  };
}

/** Adds a container of `stubId` to the table as the manager does once it runs. */
export function addContainer(
  table: ContainerTable,
  c: {
    id: string;
    stubId: string;
    workspaceId: string;
    state?: "starting" | "running" | "stopping";
    since: number;
  },
): void {
  table.add({
    id: c.id,
    stubId: c.stubId,
    workspaceId: c.workspaceId,
    agentId: "agent-1",
    state: c.state ?? "running",
    since: c.since,
    stopRequested: false,
    reservation: { agentId: "agent-1", cpuMillicores: 1000, memoryBytes: 128 * 1024 * 1024, gpuCount: 0 },
  });
}

/** Other areas' routes for the harness's app; with `sandboxes`, the container list shows theirs too. */
export interface MoreAreas {
  routes?: AreaRoutes[];
  sandboxes?: SandboxService;
  /** Task records list their outputs. */
  outputs?: OutputStore;
  fleet?: TaskAppOptions["fleet"];
  dashboard?: TaskAppOptions["dashboard"];
}

export async function startHttpHarness(
  suite: { after: (fn: () => unknown) => void },
  o: {
    costRates?: CostRates;
    /** More services for the app, built on the harness's store, NATS and container table. */
    more?: (
      h: TaskHarness,
      containers: ContainerTable,
      suite: { after: (fn: () => unknown) => void },
      deployments: DeploymentService,
    ) => Promise<MoreAreas>;
  } = {},
): Promise<HttpHarness> {
  const { defer, later } = teardownStack(suite);
  const h = await startTaskHarness(later);
  const log = pino({ level: "silent" });
  const { service: deployments } = deploymentService(h);
  await deployments.open();
  defer(() => deployments.close());
  const events = new EventStream({ nats: h.nc, log });
  await events.start();
  defer(() => events.stop());
  const hooks = webhookSystem(h.store, { timeoutMs: 300 });
  const secrets = new SecretService({ db: h.store.db, key: randomKey() });
  const state = new StateObjects(new QueueStore({ nc: h.nc }), new MapStore(h.nc), new SignalStore(h.nc));
  await state.signals.start();
  defer(() => state.signals.stop());
  const containers = new ContainerTable();
  const more = o.more ? await o.more(h, containers, later, deployments) : {};
  const list = () => containers.info();
  const agents = {
    client: (): never => {
      throw new BerthError("unavailable", "no agent runs in this test");
    },
  };
  const routes: AreaRoutes[] = [
    deploymentsHttpRoutes({
      deployments,
      tasks: h.tasks,
      containers: { activeContainers: (stubId) => containers.live((c) => c.stubId === stubId).length },
    }),
    eventsHttpRoutes(events),
    webhooksHttpRoutes(hooks.service),
    secretsHttpRoutes(secrets),
    stateHttpRoutes(state),
    logsHttpRoutes(new LogQuery({ nats: h.nc, log }), {
      tokens: h.store.tokens,
      lookup: async (ws, id) => ({ stubId: (await deployments.get(ws, id)).stubId }),
      containersOf: (stubId) => containers.info((c) => c.stubId === stubId),
      onContainersChange: (fn) => containers.onChange(() => fn()),
      agents,
    }),
    more.sandboxes
      ? sandboxesHttpRoutes(more.sandboxes, { list })
      : { api: [containerRoutes({ containers: { list } })] },
    createUsage({ db: h.store.db }).routes,
    ...(more.routes ?? []),
  ];
  const outputs = more.outputs;
  const audit = new AuditTrail({ db: h.store.db, events, log });
  defer(() => audit.idle());
  const app = await buildTaskApp(h, {
    audit,
    functions: {
      deployments,
      agents,
      ...(o.costRates ? { costRates: o.costRates } : {}),
      ...(outputs ? { outputs: (ws: string, taskId: string) => outputs.ofTask(ws, taskId) } : {}),
    },
    areas: routes.map((r) => ({ routes: r })),
    ...(more.fleet ? { fleet: more.fleet } : {}),
    ...(more.dashboard ? { dashboard: more.dashboard } : {}),
  });
  defer(() => app.close());

  const a = h.ws;
  const b = h.otherWs;
  const tokenA = await h.store.tokens.create(a.id, { name: "a" });
  const tokenB = (await h.store.tokens.create(b.id, { name: "b" })).secret;

  const deployment = await deployments.deploy(a.id, deployInput("canary-web", "endpoint"));
  const { stub } = await h.tasks.upsertStub(a.id, {
    name: "canary-fn",
    type: "function",
    config: stubConfig(),
    extra: stubExtra(),
  });
  const [taskId] = await h.tasks.submit(a.id, stub.id, [new TextEncoder().encode("x")]);
  const webhook = await hooks.service.create(a.id, {
    url: "https://hooks.example.org/canary",
    description: "canary",
  });
  await secrets.create(a.id, "CANARY_SECRET", "canary-value");
  // A queue, a map and a signal of A under the same name the routes' {name} takes.
  await state.queues.put(a.id, "CANARY_SECRET", new TextEncoder().encode("canary"));
  await state.maps.set(a.id, "CANARY_SECRET", "k", new TextEncoder().encode("canary"));
  await state.signals.set(a.id, "CANARY_SECRET", 600);
  const bytes = new TextEncoder().encode("canary code");
  const objectSha256 = createHash("sha256").update(bytes).digest("hex");
  await h.objects.putBytes(a.id, objectSha256, bytes);
  addContainer(containers, { id: "ctr-canary", stubId: stub.id, workspaceId: a.id, since: Date.now() });

  return {
    h,
    app,
    events,
    audit,
    deployments,
    containers,
    a,
    b,
    tokenA: tokenA.secret,
    tokenB,
    seeded: {
      deployment,
      stubId: stub.id,
      taskId: taskId as string,
      webhookId: webhook.webhook.id,
      secretName: "CANARY_SECRET",
      tokenId: tokenA.record.id,
      objectSha256,
      containerId: "ctr-canary",
    },
  };
}

/**
 * Starts the harness's app listening on a loopback port: the environment for
 * a `berth` command that reaches it with `token`, from an empty HOME of `suite`.
 */
export async function cliEnv(
  x: HttpHarness,
  suite: { after: (fn: () => unknown) => void },
  token: string,
): Promise<NodeJS.ProcessEnv> {
  await x.app.listen({ host: "127.0.0.1", port: 0 });
  return {
    HOME: tempDir(suite),
    BERTH_URL: `http://127.0.0.1:${(x.app.server.address() as AddressInfo).port}`,
    SERVICE_TOKEN: token,
  };
}
