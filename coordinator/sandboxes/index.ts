export { SandboxService } from "./service.ts";
export {
  ProcessTable,
  SandboxProcess,
  type ProcessInfo,
  type ProcessStatus,
  type OutputStream,
} from "./processes.ts";
export { OutputBuffer, OUTPUT_BUFFER_BYTES } from "./output-buffer.ts";
export { SandboxLabels, DEFAULT_SANDBOX_TTL_SECONDS, KEEP_ALIVE_ARGS, sandboxRequest } from "./request.ts";
export type { SandboxAgentApi, SandboxAgents, SandboxServiceOptions, SandboxView } from "./types.ts";
