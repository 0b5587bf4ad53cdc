// The endpoints area's entry point: what other areas may use of it.
export { EndpointDispatcher } from "./dispatch.ts";
export type { TaskRun, TryResult } from "./dispatch.ts";
export { checkBody, describeBodyMismatch } from "./handler-params.ts";
export { attachEndpointHostRewrite, hostUrl, rewriteEndpointHost } from "./host-names.ts";
// The forwarder moved to the containers area; kept here for callers not yet moved (inference/routes.ts).
export { endpointRoute } from "./raw-route.ts";
export { EndpointAuth } from "./resolve.ts";
export { endpointRoutes, serveEndpointRequest } from "./routes.ts";
export { RUNNER_HTTP_PORT } from "./types.ts";
export { attachEndpointUpgrades, spliceUpgrade, upgradeHead } from "./websocket.ts";
export { createEndpoints, endpointsHttpRoutes } from "./area.ts";
export type { EndpointsDeps } from "./area.ts";
