import { hostname } from "node:os";
import pino, { type Logger } from "pino";
import { describeError } from "../shared/errors.ts";
import { BERTH_VERSION } from "../shared/version.ts";
import { createBots } from "./bots/index.ts";
import { openCluster } from "./cluster.ts";
import {
  CodePusher,
  ContainerManager,
  forgetTunnelsOfGoneContainers,
  natsContainerEvents,
  withSnapshotImages,
} from "./containers/index.ts";
import { DatabaseService, databaseImage } from "./databases/index.ts";
import { createDeploymentTicker, DeploymentService } from "./deployments/index.ts";
import { buildHttpApp, type CoordinatorHttpDeps, managedShellTargets, shellRoute } from "./edge/index.ts";
import { EndpointDispatcher } from "./endpoints/index.ts";
import { EventStream, taskEvents, WorkspaceEvents } from "./events/index.ts";
import type { FleetView } from "./fleet/index.ts";
import { createImages, imageEvents, imageGcIntervalMs } from "./images/index.ts";
import { createInference, InProcessInference } from "./inference/index.ts";
import { Lifecycle, StepFailed, type StepHook } from "./lifecycle.ts";
import { WorkspaceLimitsCache } from "./limits/index.ts";
import { LogQuery } from "./logs/index.ts";
import { CoordinatorMetrics, MetricsIngest, PoolSampler } from "./metrics/index.ts";
import { Objects } from "./objects/index.ts";
import type { ResolvedCoordinatorOptions } from "./options.ts";
import { OUTPUT_SWEEP_MS, OutputStore, serveOutputOps } from "./outputs/index.ts";
import { PortProxy } from "./ports/index.ts";
import type { Store } from "./records.ts";
import { SandboxService, sandboxPortTargets, sandboxShellTargets } from "./sandboxes/index.ts";
import { Planner } from "./scheduler/index.ts";
import { SecretService } from "./secrets/index.ts";
import { DatabaseMembers, DeploymentMembers, healthProbe, StackService } from "./stacks/index.ts";
import { StartupError } from "./startup.ts";
import { MapStore, QueueStore, SignalStore, StateObjects, serveStateOps } from "./state/index.ts";
import { RelayRouter } from "./streams/index.ts";
import { TaskService } from "./tasks/index.ts";
import { VolumeFiles } from "./volumes/index.ts";
import { selfUrlMatcher, WebhookDispatcher, WebhookService } from "./webhooks/index.ts";

export interface RunningCoordinator {
  url: string;
  port: number;
  store: Store;
  fleet: FleetView;
  tasks: TaskService;
  containers: ContainerManager;
  secrets: SecretService;
  deployments: DeploymentService;
  stop(): Promise<void>;
}

export { StartupError } from "./startup.ts";

/** What a start-up failure says it could not do, by step (the rest say "cannot start <step>"). */
const STEP_FAILURE: Record<string, string> = {
  "agent users": "cannot write nats-server's agent users (agentNats.usersFile)",
  "task service": "cannot start the task service",
  deployments: "cannot load the deployments",
};

export interface StartHooks {
  /** Called before each start-up step with its name (tests make a chosen step fail). */
  beforeStep?: StepHook;
}

/**
 * The coordinator's composition root: builds each area in order on one
 * lifecycle stack (coordinator/lifecycle.ts). A failure at any step stops
 * everything started before it, in reverse order; stop() walks the same stack.
 */
export async function startCoordinator(
  o: ResolvedCoordinatorOptions,
  log: Logger = pino({ level: o.logLevel }),
  hooks: StartHooks = {},
): Promise<RunningCoordinator> {
  const life = new Lifecycle(log, hooks.beforeStep);
  try {
    return await wire(o, log, life);
  } catch (e) {
    await life.stopAll();
    if (e instanceof StartupError) throw e;
    if (!(e instanceof StepFailed)) throw e;
    if (e.cause instanceof StartupError) throw e.cause;
    const what =
      e.step === "listen"
        ? `cannot listen on ${o.host}:${o.port}`
        : (STEP_FAILURE[e.step] ?? `cannot start ${e.step}`);
    throw new StartupError(`${what}: ${describeError(e.cause)}`);
  }
}

async function wire(
  o: ResolvedCoordinatorOptions,
  log: Logger,
  life: Lifecycle,
): Promise<RunningCoordinator> {
  const step = life.step.bind(life);
  const { tls, secretKey, store, nc, fleet, join, revoker, agentClients, tunnels } = await openCluster(
    o,
    log,
    step,
  );
  // The one planner: every container's reservation (runners, sandboxes, pods) and workspace usage.
  const planner = new Planner({ fleet });
  const objects = new Objects(store.objects, o.dataDir);
  const codeArchives = codeArchivesOf(objects);
  const events = new EventStream({
    nats: nc,
    log: log.child({ area: "events" }),
    ...(o.streams.eventsMaxAgeMs ? { maxAgeMs: o.streams.eventsMaxAgeMs } : {}),
    ...(o.streams.eventsMaxBytes ? { maxBytes: o.streams.eventsMaxBytes } : {}),
  });
  const workspaceEvents = new WorkspaceEvents(events, store.workspaces, log.child({ area: "events" }));
  const limitsCache = new WorkspaceLimitsCache({ repo: store.limits });
  const tasks = new TaskService({
    store,
    limits: limitsCache,
    nats: nc,
    objects,
    log: log.child({ area: "tasks" }),
    onTaskStatus: taskEvents(workspaceEvents.emit),
    // RUNNING tasks of an agent lost past the bound go to RETRY (docs/reliability.md "Stuck work").
    agents: fleet,
  });
  await step(
    "task service",
    async () => {
      await events.start();
      try {
        await tasks.start();
      } catch (e) {
        await events.stop();
        throw e;
      }
    },
    async () => {
      await tasks.stop();
      await events.stop();
    },
  );
  const secrets = new SecretService({ db: store.db, key: secretKey });
  // Late-bound: the deployment service tells the container manager about changes, and the manager reads its states.
  let containers: ContainerManager | undefined;
  const deployments = new DeploymentService({
    repo: store.deployments,
    tasks,
    log: log.child({ area: "deployments" }),
    baseUrl: o.publicUrl,
    ...(o.endpointDomain ? { endpointDomain: o.endpointDomain } : {}),
    nats: nc,
    events: workspaceEvents.emit,
    onStubChange: (stubId) => containers?.invalidateStub(stubId),
  });
  await step(
    "deployments",
    () => deployments.open(),
    () => deployments.close(),
  );
  const manager = new ContainerManager({
    fleet,
    activity: tasks,
    // A stub whose image is a sandbox's filesystem snapshot starts on the agent holding it.
    stubs: withSnapshotImages(store.stubs, store.sandboxes),
    workspaceLimits: (ws) => limitsCache.get(ws),
    code: codeArchives,
    agents: agentClients,
    events: natsContainerEvents(nc, log.child({ area: "containers" })),
    secrets,
    deployments: deployments.states,
    onScale: (ev) => deployments.recordScaling(ev),
    planner,
    log: log.child({ area: "containers" }),
  });
  containers = manager;
  tasks.useContainerCounts(manager);
  tasks.onStubChange((stubId) => manager.invalidateStub(stubId));
  // A container that is gone takes its tunnels (keep-alive sockets) with it.
  forgetTunnelsOfGoneContainers(manager, tunnels);
  await step(
    "container manager",
    () => manager.start(),
    () => manager.stop(),
  );
  const sandboxes = new SandboxService({
    repo: store.sandboxes,
    stubs: store.stubs,
    fleet,
    agents: agentClients,
    code: codeArchives,
    secrets,
    events: natsContainerEvents(nc, log.child({ area: "sandboxes" })),
    publicUrl: o.publicUrl,
    ...(o.endpointDomain ? { endpointDomain: o.endpointDomain } : {}),
    planner,
    placementWaitMs: o.placementWaitMs,
    onWaiting: (w) =>
      workspaceEvents.emit(w.workspaceId, "sandbox.waiting", w.stubId, {
        stub_id: w.stubId,
        kind: w.kind,
        reason: w.reason,
        wait_ms: w.waitMs,
      }),
    limits: (ws) => limitsCache.get(ws),
    log: log.child({ area: "sandboxes" }),
  });
  await step(
    "sandboxes",
    () => sandboxes.open(),
    () => sandboxes.close(),
  );
  const metricsIngest = await step(
    "metrics ingest",
    () => {
      const ingest = new MetricsIngest({
        nats: nc,
        repo: store.metrics,
        log: log.child({ area: "metrics" }),
      });
      ingest.start();
      return ingest;
    },
    (m) => m.stop(),
  );
  await step(
    "pool sampler",
    () => {
      const sampler = new PoolSampler({
        repo: store.metrics,
        agents: () => fleet.ready(),
        latest: (id) => metricsIngest.latest(id),
        coordinatorId: `${hostname()}/${process.pid}`,
        retentionMs: o.metricsRetentionMs,
        log: log.child({ area: "metrics" }),
      });
      sampler.start();
      return sampler;
    },
    (s) => s.stop(),
  );
  const prometheus = new CoordinatorMetrics({
    taskCounts: () => store.metrics.taskStatusCounts(),
    containers: () => manager.list(),
    stubType: async (id) => (await store.stubs.get(id))?.type,
    agentStates: () => fleet.list().map((a) => a.state),
  });
  await step(
    "deployment ticker",
    () => {
      const ticker = createDeploymentTicker({
        db: store.db,
        repo: store.deployments,
        tasks,
        log: log.child({ area: "schedules" }),
      });
      ticker.start();
      return ticker;
    },
    (t) => t.stop(),
  );
  const webhookDispatcher = new WebhookDispatcher({
    repo: store.webhooks,
    key: secretKey,
    log: log.child({ area: "webhooks" }),
  });
  // Events this coordinator stored: each is delivered once across coordinators.
  await step(
    "webhook dispatcher",
    () => webhookDispatcher.start(events.localFeed),
    () => webhookDispatcher.stop(),
  );
  let listeningPort = o.port;
  const webhooks = new WebhookService({
    store,
    key: secretKey,
    dispatcher: webhookDispatcher,
    isSelf: selfUrlMatcher({ publicUrl: o.publicUrl, port: () => listeningPort }),
  });
  const endpoints = await step(
    "endpoints",
    () =>
      new EndpointDispatcher({
        tokens: store.tokens,
        deployments,
        containers: manager,
        tunnels,
        tasks,
        log: log.child({ area: "endpoints" }),
      }),
    (e) => e.close(),
  );
  // Hosted inference: the OpenAI-compatible /v1 gateway over model deployments (docs/inference.md).
  const inference = await step(
    "inference",
    () =>
      createInference({
        endpoints,
        deployments,
        repo: store.inference,
        limits: (ws) => limitsCache.get(ws),
        registry: prometheus.registry,
        log: log.child({ area: "inference" }),
      }),
    (g) => g.close(),
  );
  // Containers' calls through their agents (Queue, Map, Signal, Output, a bot's model.chat): one
  // router, each area registering its ops; it starts once they all have ("container relay" below).
  const relay = new RelayRouter(nc, log.child({ area: "relay" }));
  // Queue, Map and Signal (docs/queues.md), for the SDK's gateway and, through agents, containers.
  const queues = new QueueStore({ nc, maxItems: async (ws) => (await limitsCache.get(ws)).maxQueueItems });
  const state = new StateObjects(queues, new MapStore(nc), new SignalStore(nc), { foreign: relay });
  serveStateOps(relay, state);
  await step(
    "signals",
    () => state.signals.start(),
    () => state.signals.stop(),
  );
  const bots = await step(
    "bots",
    () =>
      createBots({
        store,
        deployments,
        tasks,
        inference: new InProcessInference(inference),
        relay,
        nats: nc,
        log: log.child({ area: "bots" }),
      }),
    (b) => b.stop(),
  );
  await step("bot firings", () => bots.start());
  // Outputs (docs/outputs.md): containers' uploads through their agents, swept at expiry.
  const outputs = new OutputStore({
    root: `${o.dataDir}/outputs`,
    signingKey: secretKey.bytes,
    publicUrl: o.publicUrl,
  });
  serveOutputOps(relay, outputs);
  await step(
    "container relay",
    () => relay.start(),
    () => relay.stop(),
  );
  await step(
    "output sweeper",
    () =>
      outputs.startSweeper(OUTPUT_SWEEP_MS, (e) =>
        log.error({ err: describeError(e) }, "sweeping expired outputs failed"),
      ),
    (stopSweeper) => stopSweeper(),
  );
  const ports = new PortProxy({
    targets: sandboxPortTargets(store.sandboxes, store.stubs),
    tunnels,
    tokens: store.tokens,
    log: log.child({ area: "ports" }),
    ...(o.endpointDomain ? { endpointDomain: o.endpointDomain } : {}),
    onActivity: (id) => sandboxes.touch(id),
  });
  const volumeFiles = new VolumeFiles(o.volumeRoot);
  const logs = new LogQuery({ nats: nc, log: log.child({ area: "logs" }) });
  // Image builds and the GC of built images (docs/images.md).
  const {
    builds: images,
    gc: imageGc,
    orphans: imageBuildOrphans,
  } = createImages({
    repo: store.builtImages,
    deployments: store.deployments,
    planner,
    agents: agentClients,
    readyAgentIds: () => fleet.ready().map((a) => a.agentId),
    secrets,
    code: new CodePusher(codeArchives),
    ...(o.registry ? { registry: o.registry } : {}),
    ...(o.pipIndex ? { pipIndex: o.pipIndex } : {}),
    ...(o.condaChannels ? { condaChannels: o.condaChannels } : {}),
    placementWaitMs: o.placementWaitMs,
    gcAfterMs: o.imageGcAfterMs,
    onStatus: imageEvents(workspaceEvents.emit),
    log,
    nats: nc,
  });
  await step(
    "image GC",
    () => imageGc.start(imageGcIntervalMs(o.imageGcAfterMs)),
    () => imageGc.stop(),
  );
  await step(
    "image build sweep",
    () => imageBuildOrphans.start(),
    () => imageBuildOrphans.stop(),
  );
  // Managed databases (docs/databases.md): pods of the workspace, their data on volumes, their URL in a secret.
  const databases = new DatabaseService({
    repo: store.databases,
    stubs: store.stubs,
    pods: sandboxes,
    secrets,
    image: databaseImage(images),
    volumes: volumeFiles,
    log: log.child({ area: "databases" }),
  });
  // Stacks (docs/stacks.md): deployments and databases applied as one, through their own services.
  const stacks = new StackService({
    repo: store.stacks,
    kinds: [
      new DatabaseMembers(databases),
      new DeploymentMembers({ deployments, containers: manager, probe: healthProbe(tunnels) }),
    ],
    log: log.child({ area: "stacks" }),
  });
  const app = await step(
    "http",
    async () => {
      const httpDeps: CoordinatorHttpDeps = {
        bots: bots.engine,
        stacks,
        databases,
        logs,
        state,
        store,
        fleet,
        join,
        revoker,
        tasks,
        objects,
        secrets,
        deployments,
        containers: manager,
        agents: agentClients,
        endpoints,
        inference,
        events,
        webhooks,
        costRates: o.costRates,
        limits: {
          usage: {
            containers: (ws) => planner.usage(ws),
            pendingTasks: (ws) => tasks.pendingTasks(ws),
            queueItems: (ws) => queues.items(ws),
            volumeBytes: (ws) => volumeFiles.workspaceBytes(ws),
            inference: (ws) => inference.d.limiter.usage(ws),
          },
          // A workspace's limits changed: every cache of them reads them again.
          onChange: (ws) => {
            limitsCache.invalidate(ws);
            manager.invalidateLimits(ws);
            queues
              .limitsChanged(ws)
              .catch((e) =>
                log.error({ workspaceId: ws, err: describeError(e) }, "the queue stream kept its old limits"),
              );
          },
        },
        sandboxes,
        images,
        ports,
        volumes: {
          files: volumeFiles,
          maxVolumeBytes: async (ws) => {
            const mb = (await limitsCache.get(ws)).maxVolumeMb;
            return mb === null ? null : mb * 1024 * 1024;
          },
        },
        outputs,
        prometheus: { metrics: prometheus, ...(o.metricsToken ? { token: o.metricsToken } : {}) },
        ...(o.endpointDomain ? { endpointDomain: o.endpointDomain } : {}),
        ...(tls ? { tls } : {}),
        // Served before Fastify, beside the endpoints', /v1 and exposed ports' own (edge/data-plane.ts).
        rawRoutes: [
          shellRoute({
            tokens: store.tokens,
            targets: [managedShellTargets(manager), sandboxShellTargets(store.sandboxes)],
            agents: agentClients,
            log: log.child({ area: "shell" }),
          }),
          bots.route,
        ],
        logger: log.child({ area: "http" }),
        version: BERTH_VERSION,
      };
      return buildHttpApp(httpDeps);
    },
    (app) => app.close(),
  );
  await step("listen", () => app.listen({ host: o.host, port: o.port }));
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : o.port;
  listeningPort = port;
  log.info({ url: o.publicUrl, store: store.display, nats: o.nats.url }, "coordinator ready");

  return {
    url: o.publicUrl,
    port,
    store,
    fleet,
    tasks,
    containers: manager,
    secrets,
    deployments,
    stop: () => life.stopAll(),
  };
}

/** Code archives as the agents receive them: runners, sandboxes and build contexts. */
function codeArchivesOf(objects: Objects) {
  return {
    open: (sha: string) =>
      (async function* () {
        yield* await objects.open(sha);
      })(),
  };
}
