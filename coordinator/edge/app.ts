import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { createFastify, type RawRoute } from "../http/index.ts";
import { dataPlaneServer, inferenceRoute } from "./data-plane.ts";
import type { Logger } from "pino";
import type { DeploymentService } from "../deployments/index.ts";
import type { EndpointDispatcher } from "../endpoints/index.ts";
import { rewriteEndpointHost } from "../endpoints/index.ts";
import { type InferenceGateway, inferenceRoutes } from "../inference/index.ts";
import { inferenceRestRoutes } from "../inference/index.ts";
import { type PortProxy, exposedPortRoute } from "../ports/index.ts";
import type { EventStream } from "../events/index.ts";
import type { FleetView } from "../fleet/index.ts";
import type { WebhookService } from "../webhooks/index.ts";
import type { JoinService } from "../fleet/index.ts";
import type { AgentRevoker } from "../fleet/index.ts";
import type { LogQuery } from "../logs/index.ts";
import type { Objects } from "../objects/index.ts";
import type { SandboxService } from "../sandboxes/index.ts";
import type { Secrets } from "../secrets/index.ts";
import type { AgentRepo, JoinTokenRepo } from "../fleet/index.ts";
import type { DeploymentRepo } from "../deployments/index.ts";
import type { InferenceRepo } from "../inference/index.ts";
import type { LimitsRepo } from "../limits/index.ts";
import type { MetricsRepo } from "../metrics/index.ts";
import type { StubRepo } from "../tasks/index.ts";
import type { TaskRepo } from "../tasks/index.ts";
import type { TokenRepo, WorkspaceRepo } from "../store/index.ts";
import type { TaskService } from "../tasks/index.ts";
import { metricsRoutes } from "../metrics/index.ts";
import { type PrometheusRouteDeps, prometheusRoutes } from "../metrics/index.ts";
import { registerOpenApi } from "./openapi.ts";
import { appRoutes } from "../deployments/index.ts";
import { containerRoutes } from "../sandboxes/index.ts";
import { stackRoutes } from "../stacks/index.ts";
import type { StackService } from "../stacks/index.ts";
import { taskRoutes } from "../functions/index.ts";
import type { CostRates } from "../tasks/index.ts";
import type { ManagedContainerInfo } from "../containers/index.ts";
import { fleetRoutes, joinRoutes } from "../fleet/index.ts";
import { type DeploymentLogDeps, deploymentLogRoutes } from "../logs/index.ts";
import { deploymentRoutes } from "../deployments/index.ts";
import { endpointRoute, endpointRoutes } from "../endpoints/index.ts";
import { eventRoutes } from "../events/index.ts";
import { type LimitRouteDeps, limitRoutes } from "../limits/index.ts";
import { logRoutes } from "../logs/index.ts";
import { webhookRoutes } from "../webhooks/index.ts";
import { gatewayDeploymentRoutes } from "../functions/index.ts";
import { whyStubNeverPlaceable } from "../scheduler/index.ts";
import { type ContainerExec, ContainerPythonVersions } from "../containers/index.ts";
import { gatewayObjectRoutes } from "../objects/index.ts";
import { gatewayPodRoutes } from "../sandboxes/index.ts";
import { gatewaySandboxRoutes } from "../sandboxes/index.ts";
import { gatewayStubRoutes } from "../functions/index.ts";
import { gatewayTaskRoutes } from "../tasks/index.ts";
import { healthRoutes } from "./health.ts";
import { type DashboardOptions, dashboardRoutes } from "../dashboard/index.ts";
import { secretRoutes } from "../secrets/index.ts";
import { databaseRoutes } from "../databases/index.ts";
import type { DatabaseService } from "../databases/index.ts";
import { botRoutes } from "../bots/index.ts";
import type { BotEngine } from "../bots/index.ts";
import { imageRoutes } from "../images/index.ts";
import type { ImageBuilds } from "../images/index.ts";
import { gatewayStateRoutes, stateRoutes } from "../state/index.ts";
import { gatewayEnqueueRoutes, taskQueueRoutes } from "../functions/index.ts";
import { taskStatusRoutes } from "../tasks/index.ts";
import { workspaceRoutes } from "../workspaces/index.ts";
import { outputPublicRoutes } from "../outputs/index.ts";
import type { OutputStore } from "../outputs/index.ts";
import { type VolumeRouteDeps, volumeRoutes } from "../volumes/index.ts";
import { gatewayScope, tokenScope } from "../http/index.ts";
import type { StateObjects } from "../state/index.ts";

/** The records routes read directly (the rest through their areas' services). */
export interface HttpRecords {
  tokens: TokenRepo;
  workspaces: WorkspaceRepo;
  agents: AgentRepo;
  joinTokens: JoinTokenRepo;
  tasks: TaskRepo;
  stubs: StubRepo;
  limits: LimitsRepo;
  metrics: MetricsRepo;
  inference: InferenceRepo;
  deployments: DeploymentRepo;
}

export interface HttpDeps {
  store: HttpRecords;
  fleet: FleetView;
  join: JoinService;
  /** `berth agent revoke` (POST /api/v1/agents/{id}/revoke) exists when given. */
  revoker?: AgentRevoker;
  logger: Logger | false;
  version: string;
  /** Functions and tasks: the gateway and task status routes exist when both are given. */
  tasks?: TaskService;
  objects?: Objects;
  /** Workspace secrets: the secret routes exist when given. */
  secrets?: Secrets;
  /** Managed databases (docs/databases.md): the database routes exist when given. */
  databases?: DatabaseService;
  /** Image builds: the image routes exist when given. */
  images?: ImageBuilds;
  /** Bot sessions (docs/bots.md): the bot session routes exist when given. */
  bots?: BotEngine;
  /** Stacks (docs/stacks.md): the stack routes exist when given. */
  stacks?: StackService;
  /** Deployments (with tasks): the deployment, deploy and task-queue routes exist when given. */
  deployments?: DeploymentService;
  /** Live containers per stub (deployment details, log streams). */
  containers?: Pick<DeploymentLogDeps, "containersOf" | "onContainersChange"> & {
    activeContainers(stubId: string): number;
    /** Every container the manager tracks: the container list route exists when given. */
    list?(): ManagedContainerInfo[];
  };
  /** Agents' container APIs, for the deployment log stream and asking a task's container its Python version. */
  agents?: DeploymentLogDeps["agents"] & ContainerExec;
  /** Endpoint invocation (/endpoint/...). */
  endpoints?: EndpointDispatcher;
  /** The OpenAI-compatible /v1 gateway (docs/inference.md): /v1 and the usage and catalog routes exist when given. */
  inference?: InferenceGateway;
  /** Per-deployment host names `{deployment_id}.{endpointDomain}` (coordinator option). */
  endpointDomain?: string;
  /** Workspace events: the events history and stream routes exist when given. */
  events?: EventStream;
  /** Signed webhooks: the webhook routes exist when given. */
  webhooks?: WebhookService;
  /** Sandboxes and pods: the sandbox and pod gateway routes exist when given. */
  sandboxes?: SandboxService;
  /** Workspace limits (docs/limits.md): the limits routes exist when given. */
  limits?: Omit<LimitRouteDeps, "workspaces" | "limits">;
  /** Prometheus `/metrics` and the request counters (docs/metrics.md): served when given. */
  prometheus?: PrometheusRouteDeps;
  /** Per-second rates of the task cost estimate (coordinator option costRates). @default all 0 */
  costRates?: CostRates;
  /** Workspace volumes (docs/volumes.md): the volume routes exist when given. */
  volumes?: VolumeRouteDeps;
  /** Outputs (docs/outputs.md): their public URLs are served, and task records list them, when given. */
  outputs?: OutputStore;
  /** Container log lines (docs/logs.md): the logs routes exist when given. */
  logs?: LogQuery;
  /** Queue, Map and Signal (docs/queues.md): the state gateway and REST routes exist when given. */
  state?: StateObjects;
  /** Exposed container ports (/port/... and `{container_id}-{port}.{endpointDomain}`), served before Fastify. */
  ports?: PortProxy;
  /** Other routes served outside Fastify (the shell, bot sessions): upgrades, and plain requests they take. */
  rawRoutes?: RawRoute[];
  /** PEM certificate (chain) and key: the server is HTTPS (HTTP/1.1, so upgrades work as over HTTP). @default plain HTTP */
  tls?: TlsCredentials;
  /** The web dashboard's built files, served at `/` (docs/dashboard.md). @default dist/dashboard of the package */
  dashboard?: DashboardOptions;
}

/** Deps that are configuration, absent when the operator did not set it. */
type HttpConfigKeys = "endpointDomain" | "tls" | "dashboard";

/**
 * What the coordinator itself passes (coordinator/main.ts): every area's
 * dependency present, so an area added to HttpDeps and forgotten in the
 * wiring fails to type-check. Tests mount subsets through HttpDeps, whose
 * area fields are optional ("the routes exist when given").
 */
export type CoordinatorHttpDeps = Required<Omit<HttpDeps, HttpConfigKeys>> & Pick<HttpDeps, HttpConfigKeys>;

/**
 * The routes served outside Fastify, in order: /endpoint/... (the hot path, its
 * added-latency budget is 2 ms, needing none of Fastify's routing, hooks or
 * body parsing), the /v1 POSTs, exposed ports, then the composition root's
 * others (the shell, bot sessions). An upgrade none takes is one 404.
 */
function rawRoutesOf(deps: HttpDeps): RawRoute[] {
  return [
    ...(deps.endpoints
      ? [endpointRoute(deps.endpoints, deps.endpointDomain ? { endpointDomain: deps.endpointDomain } : {})]
      : []),
    ...(deps.inference ? [inferenceRoute(deps.inference)] : []),
    ...(deps.ports ? [exposedPortRoute(deps.ports)] : []),
    ...(deps.rawRoutes ?? []),
  ];
}

/** What an HTTPS server is made with (coordinator option `tls`, read by loadTlsCredentials). */
export interface TlsCredentials {
  cert: string | Buffer;
  key: string | Buffer;
}

type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** node:http's server, or node:https's with these credentials: the same handler either way. */
function serverConstructor(tls: TlsCredentials | undefined): (handler: RequestHandler) => Server {
  // Fastify's default keep-alive (72 s), which it sets only on servers it makes itself: node's own
  // 5 s closed idle connections that clients and load balancers (idle timeouts of 60 s) still
  // counted as open, and their next request failed ("fetch failed", other side closed).
  const keepAlive = (server: Server) => Object.assign(server, { keepAliveTimeout: KEEP_ALIVE_MS });
  if (!tls) return (handler) => keepAlive(createServer(handler));
  return (handler) => keepAlive(createHttpsServer({ cert: tls.cert, key: tls.key }, handler));
}

const KEEP_ALIVE_MS = 72_000;

/** The coordinator's public HTTP API: one plugin per area. */
export async function buildHttpApp(deps: HttpDeps): Promise<FastifyInstance> {
  const app = createFastify({
    logger: deps.logger,
    ...(deps.endpointDomain
      ? { rewriteUrl: (req: IncomingMessage) => rewriteEndpointHost(deps.endpointDomain as string, req) }
      : {}),
    // Fastify only reads it to say "https://" in its listening line; serverFactory makes the server.
    ...(deps.tls ? { https: { cert: deps.tls.cert, key: deps.tls.key } } : {}),
    // The data plane (edge/data-plane.ts): raw routes before Fastify, and the one upgrade listener.
    serverFactory: dataPlaneServer(serverConstructor(deps.tls), rawRoutesOf(deps), deps.logger || undefined),
  });
  // First, so its request hook (not encapsulated) covers every route registered after it.
  if (deps.prometheus) await app.register(prometheusRoutes(deps.prometheus));
  await registerOpenApi(app, deps.version);
  const tokens = deps.store.tokens;
  // Public: no token (or a check of their own).
  await app.register(healthRoutes(deps.version));
  // The dashboard's page and its assets: files only; the page calls the token-scoped API below.
  await app.register(dashboardRoutes(deps.dashboard));
  if (deps.outputs) await app.register(outputPublicRoutes(deps.outputs));
  await app.register(joinRoutes(deps.join));
  if (deps.endpoints) await app.register(endpointRoutes(deps.endpoints));
  if (deps.inference) await app.register(inferenceRoutes(deps.inference));
  if (deps.tasks && deps.deployments)
    await app.register(taskQueueRoutes({ tokens, deployments: deps.deployments, tasks: deps.tasks }));

  // The token-authenticated API (/api/v1/..., /v2/task): one token hook for all of it (coordinator/http/scopes.ts).
  const api: FastifyPluginAsync[] = [
    workspaceRoutes(deps.store),
    fleetRoutes(deps.store, deps.fleet, deps.revoker),
  ];
  if (deps.secrets) api.push(secretRoutes(deps.secrets));
  if (deps.databases) api.push(databaseRoutes(deps.databases));
  if (deps.images) api.push(imageRoutes(deps.images));
  const pythons = deps.agents ? new ContainerPythonVersions(deps.agents) : undefined;
  const pythonOf = pythons ? (agentId: string, id: string) => pythons.of(agentId, id) : undefined;
  const outputStore = deps.outputs;
  const outputsOf = outputStore ? (ws: string, taskId: string) => outputStore.ofTask(ws, taskId) : undefined;
  if (deps.tasks && deps.objects) {
    api.push(
      taskStatusRoutes(deps.tasks, outputsOf, pythonOf),
      taskRoutes({
        tasks: deps.tasks,
        rows: deps.store.tasks,
        ...(outputsOf ? { outputs: outputsOf } : {}),
        ...(deps.deployments ? { deployments: deps.deployments } : {}),
        ...(deps.costRates ? { costRates: deps.costRates } : {}),
      }),
    );
  }
  if (deps.tasks && deps.deployments) {
    const deployments = deps.deployments;
    api.push(
      deploymentRoutes({ deployments, tasks: deps.tasks, containers: deps.containers ?? deps.tasks }),
      appRoutes({ deployments }),
    );
  }
  if (deps.containers?.list) {
    const list = deps.containers.list.bind(deps.containers);
    const sandboxes = deps.sandboxes;
    api.push(
      containerRoutes({
        containers: { list },
        ...(sandboxes ? { sandboxes: (ws: string) => sandboxes.liveContainers(ws) } : {}),
      }),
    );
  }
  if (deps.stacks) api.push(stackRoutes(deps.stacks));
  if (deps.bots) api.push(botRoutes(deps.bots));
  if (deps.events) api.push(eventRoutes({ events: deps.events }));
  if (deps.webhooks) api.push(webhookRoutes(deps.webhooks));
  if (deps.limits)
    api.push(limitRoutes({ workspaces: deps.store.workspaces, limits: deps.store.limits, ...deps.limits }));
  api.push(metricsRoutes({ metrics: deps.store.metrics, stubs: deps.store.stubs }));
  if (deps.logs) api.push(logRoutes({ logs: deps.logs }));
  if (deps.state) api.push(stateRoutes(deps.state));
  if (deps.volumes) api.push(volumeRoutes(deps.volumes));
  if (deps.inference)
    api.push(
      inferenceRestRoutes({
        repo: deps.store.inference,
        workspaces: deps.store.workspaces,
        deployments: deps.store.deployments,
        models: deps.inference.d.models,
      }),
    );
  await app.register(tokenScope(tokens, ...api));

  // The SDK's gateway (/api/v1/gateway/...): a token, and failures as 200 with ok:false.
  const gateway: FastifyPluginAsync[] = [];
  if (deps.tasks && deps.objects)
    gateway.push(
      gatewayObjectRoutes(deps.objects),
      gatewayStubRoutes(deps.tasks),
      gatewayTaskRoutes(deps.tasks),
    );
  if (deps.tasks && deps.deployments)
    gateway.push(
      gatewayDeploymentRoutes(deps.deployments, (stub) => whyStubNeverPlaceable(deps.fleet.list(), stub)),
      gatewayEnqueueRoutes({ tasks: deps.tasks }),
    );
  if (deps.sandboxes) gateway.push(gatewaySandboxRoutes(deps.sandboxes), gatewayPodRoutes(deps.sandboxes));
  if (deps.state) gateway.push(gatewayStateRoutes(deps.state));
  await app.register(gatewayScope(tokens, ...gateway));

  // The deployment log stream is a gateway scope of its own (it is also mounted alone).
  const containers = deps.containers;
  const deployments = deps.deployments;
  if (deps.tasks && deployments && containers && deps.agents) {
    await app.register(
      deploymentLogRoutes({
        tokens,
        lookup: async (ws, id) => ({ stubId: (await deployments.get(ws, id)).stubId }),
        containersOf: (stubId) => containers.containersOf(stubId),
        onContainersChange: (fn) => containers.onContainersChange(() => fn()),
        agents: deps.agents,
      }),
    );
  }
  return app;
}
