export { SandboxService } from "./service.ts";
export { SandboxLabels, DEFAULT_SANDBOX_TTL_SECONDS, KEEP_ALIVE_ARGS, sandboxRequest } from "./request.ts";
export type { SandboxAgentApi, SandboxAgents, SandboxServiceOptions, SandboxView } from "./types.ts";
export { containerRoutes } from "./container-routes.ts";
export { gatewayPodRoutes } from "./pod-routes.ts";
export type { SandboxStubExtra } from "./request.ts";
export { gatewaySandboxRoutes } from "./routes.ts";
export { sandboxPortTargets, sandboxShellTargets } from "./targets.ts";
export { SandboxRepo } from "./store.ts";
