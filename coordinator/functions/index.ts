// The functions area's entry point: what other areas may use of it.
export { gatewayDeploymentRoutes } from "./deploy-routes.ts";
export { StubConfigSchema, StubExtraSchema, gatewayStubRoutes } from "./stub-routes.ts";
export { taskRoutes } from "./task-routes.ts";
export { gatewayEnqueueRoutes, taskQueueRoutes } from "./taskqueue-routes.ts";
export { createFunctions, functionsHttpRoutes } from "./area.ts";
export type { FunctionsDeps } from "./area.ts";
