// The capacity package's entry point: host facts, GPU preflight and watching,
// and what to add to a container's OCI config for its GPUs.

export { type CdiSpec, injectionFromCdiSpec, parseCdiSpec } from "./cdi.ts";
export { type CommandResult, type CommandRunner, execaRunner, findExecutable } from "./commands.ts";
export {
  agentGpuInjection,
  DRIVER_CAPABILITIES,
  type GpuInjectionStrategy,
  GpuInjector,
  type GpuInjectorOptions,
  resolveGpuInjectorOptions,
} from "./gpu-injection.ts";
export {
  createGpuProbe,
  type GpuProbe,
  type GpuProbeOptions,
  NvidiaGpuProbe,
  type ResolvedGpuProbeOptions,
  resolveGpuProbeOptions,
} from "./gpu-probe.ts";
export { GpuWatcher, type GpuWatcherOptions, resolveGpuWatcherOptions } from "./gpu-watcher.ts";
export { type ReadHostCapacityOptions, readDiskCapacity, readHostCapacity } from "./host.ts";
export type {
  GpuCgroupRule,
  GpuDeviceNode,
  GpuHook,
  GpuHookPhase,
  GpuInjection,
  GpuMount,
} from "./injection-types.ts";
export { gpuTypeFromModel, migProfileMemoryMiB } from "./nvidia.ts";
