// Hosted inference (docs/inference.md): the /v1 gateway, its model
// directory, limits and usage. createInference wires them for main.ts; /v1
// (HTTP) and InProcessInference (callers inside the coordinator) both take
// the gateway's one request path.

import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { EndpointDispatcher } from "../endpoints/index.ts";
import type { DeploymentWithStub } from "../deployments/index.ts";
import type { InferenceRepo } from "./store.ts";
import { InferenceGateway } from "./gateway.ts";
import { InferenceLimiter, type InferenceLimits } from "./limiter.ts";
import { InferenceMetrics } from "./metrics.ts";
import { ModelDirectory } from "./models.ts";
import { UsageWriter } from "./usage-writer.ts";

export { InferenceGateway } from "./gateway.ts";
export type { InferenceRoute } from "./gateway.ts";
export { InProcessInference } from "./in-process.ts";
export type { InProcessOptions } from "./in-process.ts";
export type { InferenceAnswer } from "./answer-sink.ts";
export { inferenceRoutes, serveInferenceRequest } from "./routes.ts";
export { ModelDirectory } from "./models.ts";
export { InferenceLimiter } from "./limiter.ts";

export interface InferenceWiring {
  endpoints: EndpointDispatcher;
  deployments: { activeDeployments(): DeploymentWithStub[] };
  repo: InferenceRepo;
  limits(workspaceId: string): Promise<InferenceLimits>;
  /** The coordinator's Prometheus registry: the gateway's series join it when given. */
  registry?: Registry;
  log: Logger;
}

export function createInference(w: InferenceWiring): InferenceGateway {
  // Usage rows are written in batches off the request's path; the usage API's reads write them first.
  const usage = new UsageWriter(w.repo, w.log);
  w.repo.readsWriteFirst(usage);
  const models = new ModelDirectory({
    activeDeployments: () => w.deployments.activeDeployments(),
    catalog: () => w.repo.catalog(),
  });
  return new InferenceGateway({
    endpoints: w.endpoints,
    models,
    usage,
    limits: w.limits,
    limiter: new InferenceLimiter(),
    ...(w.registry ? { metrics: new InferenceMetrics(w.registry) } : {}),
    log: w.log,
  });
}
export { inferenceRestRoutes } from "./admin-routes.ts";
export { InferenceRepo } from "./store.ts";
