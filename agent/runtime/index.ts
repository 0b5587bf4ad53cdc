// The runtime's entry point: other agent packages import from here only.
export type { CgroupLayout, CgroupUsage, CpuLimit, OomState } from "./cgroups.ts";
export {
  detectCgroups,
  readCpuLimit,
  readOomState,
  readPidsLimit,
  readPidsRefused,
  readUsage,
} from "./cgroups.ts";
export { DEFAULT_CONTAINER_DISK_BYTES, MIN_DISK_BYTES } from "./disk.ts";
export type { IdMap } from "./idmap.ts";
export { idInside } from "./idmap.ts";
export type { HostFacts } from "./oci-spec.ts";
export { buildOciSpec, CONTAINER_CAPABILITIES, MASKED_PATHS, READONLY_PATHS } from "./oci-spec.ts";
export type { OciSpec } from "./oci-types.ts";
export { clampedRlimits, readHostHardLimits } from "./rlimits.ts";
export type { Isolation, OciRuntimeName } from "./oci-runtimes.ts";
export { crunRefusal, ISOLATIONS, isIsolation, isOciRuntimeName, OCI_RUNTIMES } from "./oci-runtimes.ts";
export type { Assignment } from "./handover.ts";
export type { ContainerRuntimeOptions, ExecTarget, ResolvedContainerRuntimeOptions } from "./runtime.ts";
export { ContainerRuntime, resolveContainerRuntimeOptions } from "./runtime.ts";
export { DENIED_SYSCALLS } from "./seccomp.ts";
export type { ResolvedContainerSpec } from "./spec.ts";
export { resolveContainerSpec } from "./spec.ts";
export type {
  BindMount,
  ContainerEvent,
  ContainerInfo,
  ContainerLimits,
  ContainerSpec,
  ContainerStatus,
  DeviceNode,
  DeviceRule,
  ExitReason,
  LogLine,
  NetnsAddresses,
  RuntimeLogger,
  SeccompFilter,
} from "./types.ts";
