import { hostname } from "node:os";
import pino, { type Logger } from "pino";
import { describeError } from "../shared/errors.ts";
import { BERTH_VERSION } from "../shared/version.ts";
import { createBots } from "./bots/index.ts";
import { openCluster } from "./cluster.ts";
import {
  CodePusher,
  type ContainerManager,
  createContainers,
  managedShellTargets,
  natsContainerEvents,
  PullAhead,
  withSnapshotImages,
} from "./containers/index.ts";
import { createDatabases, databaseImage } from "./databases/index.ts";
import { createDeployments, createDeploymentTicker, type DeploymentService } from "./deployments/index.ts";
import { buildHttpApp, listenAlso, shellHttpRoutes } from "./edge/index.ts";
import { createEndpoints } from "./endpoints/index.ts";
import { createEvents, taskEvents } from "./events/index.ts";
import type { FleetView } from "./fleet/index.ts";
import { createFunctions } from "./functions/index.ts";
import { createImages, imageEvents } from "./images/index.ts";
import { createInference, InProcessInference } from "./inference/index.ts";
import { Lifecycle, StepFailed, type StepHook } from "./lifecycle.ts";
import { createLimits } from "./limits/index.ts";
import { createLogs } from "./logs/index.ts";
import { createMetrics } from "./metrics/index.ts";
import { createObjects, type Objects } from "./objects/index.ts";
import { loadTlsCredentials, type ResolvedCoordinatorOptions } from "./options.ts";
import { createOutputs } from "./outputs/index.ts";
import { createPorts } from "./ports/index.ts";
import type { Store } from "./records.ts";
import { createSandboxes, sandboxPortTargets, sandboxShellTargets } from "./sandboxes/index.ts";
import { Planner } from "./scheduler/index.ts";
import { createSecrets, type SecretService } from "./secrets/index.ts";
import { createStacks, healthProbe } from "./stacks/index.ts";
import { StartupError } from "./startup.ts";
import { createState } from "./state/index.ts";
import { RelayRouter } from "./streams/index.ts";
import { createTasks, type TaskService } from "./tasks/index.ts";
import { createVolumes } from "./volumes/index.ts";
import { createWebhooks, selfUrlMatcher } from "./webhooks/index.ts";
import { AuditTrail, createWorkspaces } from "./workspaces/index.ts";
import { createSso } from "./sso/index.ts";
import { createUsage } from "./usage/index.ts";

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
  const area = life.area.bind(life);
  const cluster = await openCluster(o, log, step);
  const { tls, secretKey, store, nc, fleet, agentClients, tunnels } = cluster;
  const logOf = (name: string) => log.child({ area: name });
  const domain = o.endpointDomain ? { endpointDomain: o.endpointDomain } : {};
  // The one planner: every container's reservation (runners, sandboxes, pods) and workspace usage.
  const planner = new Planner({ fleet });
  const limits = await area("limits", () =>
    createLimits({ repo: store.limits, workspaces: store.workspaces }),
  );
  const objects = await area("objects", () => createObjects({ repo: store.objects, dataDir: o.dataDir }));
  const codeArchives = codeArchivesOf(objects.service);
  const events = await area("events", () =>
    createEvents({
      nats: nc,
      workspaces: store.workspaces,
      log: logOf("events"),
      ...(o.streams.eventsMaxAgeMs ? { maxAgeMs: o.streams.eventsMaxAgeMs } : {}),
      ...(o.streams.eventsMaxBytes ? { maxBytes: o.streams.eventsMaxBytes } : {}),
    }),
  );
  const emit = events.service.workspace.emit;
  const tasks = await area("task service", () =>
    createTasks({
      store,
      limits: limits.service.cache,
      budgets: limits.service.budgets,
      nats: nc,
      objects: objects.service,
      log: logOf("tasks"),
      onTaskStatus: taskEvents(emit),
      // RUNNING tasks of an agent lost past the bound go to RETRY (docs/reliability.md "Stuck work").
      agents: fleet,
    }),
  );
  const secrets = await area("secrets", () => createSecrets({ db: store.db, key: secretKey }));
  // Late-bound: deployments tell the container manager about changes and show its counts; the manager reads their states.
  let manager: ContainerManager | undefined;
  let pullAhead: PullAhead | undefined;
  const deployments = await area("deployments", () =>
    createDeployments({
      repo: store.deployments,
      tasks: tasks.service,
      log: logOf("deployments"),
      baseUrl: o.publicUrl,
      ...domain,
      nats: nc,
      events: emit,
      onStubChange: (stubId) => {
        manager?.invalidateStub(stubId);
        pullAhead
          ?.stubChanged(stubId)
          .catch((e) => log.warn({ stubId, err: describeError(e) }, "pull ahead: cannot read the stub"));
      },
      containers: {
        activeContainers: (stubId) => manager?.activeContainers(stubId) ?? 0,
        startError: (stubId) => manager?.startError(stubId),
      },
    }),
  );
  const containers = await area("container manager", () => {
    const built = createContainers({
      fleet,
      activity: tasks.service,
      // A stub whose image is a sandbox's filesystem snapshot starts on the agent holding it.
      stubs: withSnapshotImages(store.stubs, store.sandboxes),
      limits: limits.service,
      code: codeArchives,
      agents: agentClients,
      events: natsContainerEvents(nc, logOf("containers")),
      secrets: secrets.service,
      deployments: deployments.service.states,
      onScale: (ev) => deployments.service.recordScaling(ev),
      planner,
      tunnels,
      log: logOf("containers"),
    });
    manager = built.service;
    tasks.service.useContainerCounts(built.service);
    tasks.service.onStubChange((stubId) => built.service.invalidateStub(stubId));
    return built;
  });
  const runners = containers.service;
  // A deployment's image goes to the hosts likely to run it before its first request (docs/images.md).
  const pulls = new PullAhead({
    fleet,
    reservations: () => planner.list(),
    stubs: store.stubs,
    deployments: deployments.service.states,
    agents: agentClients,
    log: logOf("images"),
  });
  pullAhead = pulls;
  // A GPU drained or back: an event to each workspace with containers on that agent.
  fleet.onGpuHealth((c) => {
    const workspaces = new Set(
      runners
        .list()
        .filter((x) => x.agentId === c.agentId)
        .map((x) => x.workspaceId),
    );
    const changes = [
      ...c.drained.map((d) => ["gpu.drained", d] as const),
      ...c.restored.map((d) => ["gpu.restored", d] as const),
    ];
    for (const ws of workspaces)
      for (const [type, d] of changes)
        emit(ws, type, d.uuid, {
          agent_id: c.agentId,
          hostname: c.hostname,
          gpu: d.index,
          uuid: d.uuid,
          model: d.model,
          reason: d.reason,
        });
  });
  limits.service.report({
    containers: (ws) => planner.usage(ws),
    pendingTasks: (ws) => tasks.service.pendingTasks(ws),
  });
  const sandboxes = await area("sandboxes", () =>
    createSandboxes({
      repo: store.sandboxes,
      stubs: store.stubs,
      fleet,
      agents: agentClients,
      code: codeArchives,
      secrets: secrets.service,
      events: natsContainerEvents(nc, logOf("sandboxes")),
      publicUrl: o.publicUrl,
      ...domain,
      planner,
      placementWaitMs: o.placementWaitMs,
      onWaiting: (w) =>
        emit(w.workspaceId, "sandbox.waiting", w.stubId, {
          stub_id: w.stubId,
          kind: w.kind,
          reason: w.reason,
          wait_ms: w.waitMs,
        }),
      limits: (ws) => limits.service.get(ws),
      budgets: (ws, work) => limits.service.budgets.check(ws, work),
      containers: runners,
      log: logOf("sandboxes"),
    }),
  );
  const metrics = await area("metrics", () =>
    createMetrics({
      nats: nc,
      repo: store.metrics,
      stubs: store.stubs,
      fleet,
      containers: () => runners.list(),
      coordinatorId: `${hostname()}/${process.pid}`,
      retentionMs: o.metricsRetentionMs,
      ...(o.metricsToken ? { token: o.metricsToken } : {}),
      log: logOf("metrics"),
    }),
  );
  await step(
    "deployment ticker",
    () => {
      const ticker = createDeploymentTicker({
        db: store.db,
        repo: store.deployments,
        tasks: tasks.service,
        log: logOf("schedules"),
      });
      ticker.start();
      return ticker;
    },
    (t) => t.stop(),
  );
  let listeningPort = o.port;
  const webhooks = await area("webhooks", () =>
    createWebhooks({
      store,
      key: secretKey,
      feed: events.service.stream.localFeed,
      isSelf: selfUrlMatcher({ publicUrl: o.publicUrl, port: () => listeningPort }),
      log: logOf("webhooks"),
    }),
  );
  const endpoints = await area("endpoints", () =>
    createEndpoints({
      tokens: store.tokens,
      deployments: deployments.service,
      containers: runners,
      tunnels,
      tasks: tasks.service,
      ...domain,
      log: logOf("endpoints"),
    }),
  );
  // Hosted inference: the OpenAI-compatible /v1 gateway over model deployments (docs/inference.md).
  const inference = await area("inference", () =>
    createInference({
      endpoints: endpoints.service,
      activeDeployments: () => deployments.service.activeDeployments(),
      repo: store.inference,
      workspaces: store.workspaces,
      deployments: store.deployments,
      limits: limits.service,
      registry: metrics.service.prometheus.registry,
      log: logOf("inference"),
    }),
  );
  // Containers' calls through their agents (Queue, Map, Signal, Output, a bot's model.chat): one
  // router, each area registering its ops; it starts once they all have ("container relay" below).
  const relay = new RelayRouter(nc, logOf("relay"));
  const state = await area("state", () =>
    createState({ nc, limits: limits.service, relay, log: logOf("state") }),
  );
  const bots = await area("bots", () =>
    createBots({
      store,
      deployments: deployments.service,
      tasks: tasks.service,
      inference: new InProcessInference(inference.service),
      relay,
      nats: nc,
      log: logOf("bots"),
    }),
  );
  const outputs = await area("outputs", () =>
    createOutputs({
      root: `${o.dataDir}/outputs`,
      signingKey: secretKey.bytes,
      publicUrl: o.publicUrl,
      relay,
      log: logOf("outputs"),
    }),
  );
  await step(
    "container relay",
    () => relay.start(),
    () => relay.stop(),
  );
  const ports = await area("ports", () =>
    createPorts({
      targets: sandboxPortTargets(store.sandboxes, store.stubs),
      tunnels,
      tokens: store.tokens,
      ...domain,
      onActivity: (id) => sandboxes.service.touch(id),
      log: logOf("ports"),
    }),
  );
  const volumes = await area("volumes", () => createVolumes({ root: o.volumeRoot, limits: limits.service }));
  const logs = await area("logs", () =>
    createLogs({
      nats: nc,
      log: logOf("logs"),
      deploymentLogs: {
        tokens: store.tokens,
        lookup: async (ws, id) => ({ stubId: (await deployments.service.get(ws, id)).stubId }),
        containersOf: (stubId) => runners.containersOf(stubId),
        onContainersChange: (fn) => runners.onContainersChange(() => fn()),
        agents: agentClients,
      },
    }),
  );
  // Image builds and the GC of built images (docs/images.md).
  const images = await area("images", () =>
    createImages({
      repo: store.builtImages,
      deployments: store.deployments,
      planner,
      agents: agentClients,
      readyAgentIds: () => fleet.ready().map((a) => a.agentId),
      // `berth image pull` goes through the pull ahead's per-agent pulls.
      handPull: { ready: () => fleet.ready(), pullOn: (agentId, ref) => pulls.pullOn(agentId, ref) },
      secrets: secrets.service,
      code: new CodePusher(codeArchives),
      ...(o.registry ? { registry: o.registry } : {}),
      ...(o.pipIndex ? { pipIndex: o.pipIndex } : {}),
      ...(o.condaChannels ? { condaChannels: o.condaChannels } : {}),
      placementWaitMs: o.placementWaitMs,
      gcAfterMs: o.imageGcAfterMs,
      onStatus: imageEvents(emit),
      log,
      nats: nc,
    }),
  );
  // Managed databases (docs/databases.md): pods of the workspace, their data on volumes, their URL in a secret.
  const databases = await area("databases", () =>
    createDatabases({
      repo: store.databases,
      stubs: store.stubs,
      pods: sandboxes.service,
      secrets: secrets.service,
      image: databaseImage(images.service),
      volumes: volumes.service,
      log: logOf("databases"),
    }),
  );
  // Stacks (docs/stacks.md): deployments and databases applied as one, through their own services.
  const stacks = await area("stacks", () =>
    createStacks({
      repo: store.stacks,
      databases: databases.service,
      deployments: { deployments: deployments.service, containers: runners, probe: healthProbe(tunnels) },
      log: logOf("stacks"),
    }),
  );
  const functions = await area("functions", () =>
    createFunctions({
      tokens: store.tokens,
      tasks: tasks.service,
      taskRows: store.tasks,
      deployments: deployments.service,
      outputs: (ws, taskId) => outputs.service.ofTask(ws, taskId),
      agents: agentClients,
      fleet,
      costRates: o.costRates,
    }),
  );
  const workspaces = await area("workspaces", () =>
    createWorkspaces({
      workspaces: store.workspaces,
      tokens: store.tokens,
      audit: new AuditTrail({ db: store.db, events: events.service.stream, log: logOf("audit") }),
    }),
  );
  // Single sign-on (docs/sso.md): OpenID Connect logins made into sessions by the config's group mapping.
  const sso = await area("sso", () =>
    createSso({
      ...(o.oidc ? { oidc: o.oidc } : {}),
      publicUrl: o.publicUrl,
      tokens: store.tokens,
      workspaces: store.workspaces,
      ...(workspaces.service.audit ? { audit: workspaces.service.audit } : {}),
    }),
  );
  // Usage for chargeback (docs/usage.md): computed when asked from the task, sandbox and /v1 records.
  const usage = await area("usage", () =>
    createUsage({ db: store.db, volumeBytes: (ws) => volumes.service.workspaceBytes(ws) }),
  );
  // GPU-hours and CPU-hours budgets (docs/limits.md) count what the usage report counts.
  // The /v1 token budget counts the /v1 tokens the usage report counts, the gateway's queued rows written first.
  limits.service.report({
    computeSeconds: (ws, from, to) => usage.service.computeSeconds(ws, from, to),
    v1Tokens: async (ws, from, to) => {
      await inference.service.writeUsage();
      return usage.service.v1Tokens(ws, from, to);
    },
  });
  // The shell's websocket (/api/v1/container/.../shell): the edge's own raw route.
  const shell = {
    routes: shellHttpRoutes({
      tokens: store.tokens,
      targets: [managedShellTargets(runners), sandboxShellTargets(store.sandboxes)],
      agents: agentClients,
      log: logOf("shell"),
    }),
  };
  const app = await step(
    "http",
    () =>
      buildHttpApp({
        // Raw routes are asked in this order: /endpoint/... first (the hot path), then /v1, ports, shells, bots.
        areas: [
          endpoints,
          inference,
          ports,
          shell,
          bots,
          { routes: cluster.fleetRoutes },
          workspaces,
          sso,
          metrics,
          objects,
          events,
          secrets,
          deployments,
          functions,
          sandboxes,
          webhooks,
          state,
          outputs,
          volumes,
          logs,
          images,
          databases,
          stacks,
          limits,
          usage,
        ],
        tokens: store.tokens,
        ...(workspaces.service.audit ? { audit: workspaces.service.audit } : {}),
        ...domain,
        ...(tls ? { tls } : {}),
        logger: logOf("http"),
        version: BERTH_VERSION,
      }),
    (app) => app.close(),
  );
  await step("listen", () => app.listen({ host: o.host, port: o.port }));
  const also = o.alsoListen;
  if (also)
    await step(
      `listen on ${also.host}:${also.port}`,
      () => listenAlso(app.server, { host: also.host, port: also.port, tls: loadTlsCredentials(also.tls) }),
      (l) => l.close(),
    );
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : o.port;
  listeningPort = port;
  log.info({ url: o.publicUrl, store: store.display, nats: o.nats.url }, "coordinator ready");

  return {
    url: o.publicUrl,
    port,
    store,
    fleet,
    tasks: tasks.service,
    containers: runners,
    secrets: secrets.service,
    deployments: deployments.service,
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
