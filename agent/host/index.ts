// The agent's local container host: the ContainerApi implementation that
// composes images, network, GPU assignment and the runtime.
export { type Allocation, Allocations, formatBytes, type HostResources, pickGpus } from "./allocations.ts";
export { buildContainerSpec, containerArgs, hostsFileText } from "./container-spec.ts";
export { resolveExecRequest, runcExecArgv } from "./exec.ts";
export { ContainerHost } from "./host.ts";
export { imageSummary } from "./image-ops.ts";
export { checkMountSource } from "./mounts.ts";
export {
  type ContainerHostOptions,
  type HostEvent,
  type HostGpuInjector,
  type HostImages,
  type HostLogger,
  type HostNetwork,
  type HostRunners,
  type HostRuntime,
  type ResolvedContainerHostOptions,
  resolveContainerHostOptions,
  type RuntimeHooks,
} from "./options.ts";
export type { HostRecord } from "./records.ts";
export { parseUser, type ResolvedRunRequest, resolveRunRequest } from "./request.ts";
