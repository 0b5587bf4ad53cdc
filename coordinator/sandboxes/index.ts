export { SandboxService } from "./service.ts";
export { SandboxLabels, DEFAULT_SANDBOX_TTL_SECONDS, KEEP_ALIVE_ARGS, sandboxRequest } from "./request.ts";
export type { SandboxAgentApi, SandboxAgents, SandboxServiceOptions, SandboxView } from "./types.ts";
