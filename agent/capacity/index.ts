// The capacity package's entry point: host facts, GPU preflight, watching,
// telemetry and health, and what to add to a container's OCI config for its GPUs.

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
export {
  GpuWatcher,
  type GpuWatcherOptions,
  resolveGpuWatcherOptions,
  withoutDrained,
} from "./gpu-watcher.ts";
export {
  DEFAULT_XID_HOLD_MS,
  GpuHealth,
  type GpuHealthOptions,
  GpuMonitor,
  type GpuMonitorOptions,
} from "./gpu-health.ts";
export {
  GPU_TELEMETRY_ARGS,
  GPU_TELEMETRY_FIELDS,
  GpuTelemetryReader,
  normalizePciBusId,
  parseTelemetryCsv,
  type TelemetryResult,
  type TelemetryTable,
} from "./gpu-telemetry.ts";
export { describeXid, FATAL_XIDS, KernelLogXidReader, parseKmsg, type XidEvent } from "./xid.ts";
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
