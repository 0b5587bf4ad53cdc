// The inference area: the /v1 gateway built over the endpoints and the model
// deployments, its routes (the /v1 POSTs served before Fastify, the model
// list, usage and catalog routes), and its usage writer stopped with it.
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { DeploymentRepo, DeploymentWithStub } from "../deployments/index.ts";
import type { EndpointDispatcher } from "../endpoints/index.ts";
import type { Area, AreaRoutes, RawRoute } from "../http/index.ts";
import type { Limits } from "../limits/index.ts";
import type { WorkspaceRepo } from "../store/index.ts";
import { inferenceRestRoutes } from "./admin-routes.ts";
import { InferenceGateway, type TokenBudget } from "./gateway.ts";
import { InferenceLimiter, type InferenceLimits } from "./limiter.ts";
import { InferenceMetrics } from "./metrics.ts";
import { ModelDirectory } from "./models.ts";
import { inferenceRoutes, serveInferenceRequest } from "./routes.ts";
import type { InferenceRepo } from "./store.ts";
import { UsageWriter } from "./usage-writer.ts";

/** The /v1 POST routes as a raw route: the time to first token skips Fastify (budgeted at 2 ms). */
export function inferenceRoute(gateway: InferenceGateway): RawRoute {
  return { name: "inference", takeHttp: (req, res) => serveInferenceRequest(gateway, req, res) };
}

export interface InferenceRestStores {
  repo: InferenceRepo;
  workspaces: Pick<WorkspaceRepo, "byExternalId" | "get">;
  deployments: Pick<DeploymentRepo, "list">;
}

export function inferenceHttpRoutes(gateway: InferenceGateway, stores: InferenceRestStores): AreaRoutes {
  return {
    public: [inferenceRoutes(gateway)],
    raw: [inferenceRoute(gateway)],
    api: [inferenceRestRoutes({ ...stores, models: gateway.d.models })],
  };
}

export interface InferenceDeps extends InferenceRestStores {
  endpoints: EndpointDispatcher;
  /** The model deployments (DeploymentService.activeDeployments). */
  activeDeployments(): DeploymentWithStub[];
  /** The workspace's /v1 limits come from it; requests in flight and tokens are reported to it. */
  limits: Pick<Limits, "report"> & {
    get(workspaceId: string): Promise<InferenceLimits>;
    /** The monthly /v1 token budget (Limits.v1Tokens); none: not checked. */
    v1Tokens?: TokenBudget;
  };
  /** The coordinator's Prometheus registry: the gateway's series join it when given. */
  registry?: Registry;
  log: Logger;
}

export function createInference(d: InferenceDeps): Area<InferenceGateway> {
  // Usage rows are written in batches off the request's path; the usage API's reads write them first.
  const usage = new UsageWriter(d.repo, d.log);
  d.repo.readsWriteFirst(usage);
  const models = new ModelDirectory({
    activeDeployments: () => d.activeDeployments(),
    catalog: () => d.repo.catalog(),
  });
  const limiter = new InferenceLimiter();
  d.limits.report({ inference: (ws) => limiter.usage(ws) });
  const gateway = new InferenceGateway({
    endpoints: d.endpoints,
    models,
    usage,
    limits: (ws) => d.limits.get(ws),
    limiter,
    ...(d.limits.v1Tokens ? { tokenBudget: d.limits.v1Tokens } : {}),
    ...(d.registry ? { metrics: new InferenceMetrics(d.registry) } : {}),
    log: d.log,
  });
  return { service: gateway, routes: inferenceHttpRoutes(gateway, d), stop: () => gateway.close() };
}
