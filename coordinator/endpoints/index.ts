// The endpoints area's entry point: what other areas may use of it.
export { EndpointDispatcher } from "./dispatch.ts";
export type { TaskRun, TryResult } from "./dispatch.ts";
export { checkBody, describeBodyMismatch } from "./handler-params.ts";
export { attachEndpointHostRewrite, hostUrl, rewriteEndpointHost } from "./host-names.ts";
export { containerError, errorOf, forwardRaw, responseHeaders, upstreamHeaders } from "./proxy.ts";
export { EndpointAuth, EndpointRefusal } from "./resolve.ts";
export { endpointRoutes, serveEndpointRequest } from "./routes.ts";
export { RUNNER_HTTP_PORT } from "./types.ts";
export { attachEndpointUpgrades, claimUpgrade, spliceUpgrade, upgradeHead } from "./websocket.ts";
