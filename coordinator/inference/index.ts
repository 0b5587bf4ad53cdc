// Hosted inference (docs/inference.md): the /v1 gateway, its model
// directory, limits and usage. createInference (area.ts) builds the area for
// main.ts; /v1 (HTTP) and InProcessInference (callers inside the coordinator)
// both take the gateway's one request path.

export { createInference, inferenceHttpRoutes, inferenceRoute } from "./area.ts";
export type { InferenceDeps } from "./area.ts";
export { InferenceGateway } from "./gateway.ts";
export type { InferenceRoute } from "./gateway.ts";
export { InProcessInference } from "./in-process.ts";
export type { InProcessOptions } from "./in-process.ts";
export type { InferenceAnswer } from "./answer-sink.ts";
export { inferenceRoutes, serveInferenceRequest } from "./routes.ts";
export { ModelDirectory } from "./models.ts";
export { InferenceLimiter } from "./limiter.ts";

export { inferenceRestRoutes } from "./admin-routes.ts";
export { InferenceRepo } from "./store.ts";
