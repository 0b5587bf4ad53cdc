// Workspace limits as placement filters (docs/limits.md): pure functions
// from what a workspace holds and what one more container needs to a
// yes, or to the limit that says no, in words people read where start
// reasons show. Like place(), nothing here reads a store or a clock.

import type { Reservation } from "./cluster-view.ts";
import type { PlacementRequest } from "./place.ts";

/** The limits a start is checked against; null = no limit. */
export interface ContainerLimits {
  maxContainers: number | null;
  maxCpuMillicores: number | null;
  maxMemoryMb: number | null;
  maxGpus: number | null;
}

/** What a workspace's containers hold now. */
export interface WorkspaceUsage {
  containers: number;
  cpuMillicores: number;
  memoryBytes: number;
  gpus: number;
}

export const NO_USAGE: WorkspaceUsage = { containers: 0, cpuMillicores: 0, memoryBytes: 0, gpus: 0 };

const MiB = 1024 * 1024;

/** The sum of the reservations of one workspace's containers. */
export function usageOf(
  reservations: readonly Pick<Reservation, "cpuMillicores" | "memoryBytes" | "gpuCount">[],
): WorkspaceUsage {
  const u = { ...NO_USAGE };
  for (const r of reservations) {
    u.containers++;
    u.cpuMillicores += r.cpuMillicores;
    u.memoryBytes += r.memoryBytes;
    u.gpus += r.gpuCount;
  }
  return u;
}

/** Two usages together. */
export function addUsage(a: WorkspaceUsage, b: WorkspaceUsage): WorkspaceUsage {
  return {
    containers: a.containers + b.containers,
    cpuMillicores: a.cpuMillicores + b.cpuMillicores,
    memoryBytes: a.memoryBytes + b.memoryBytes,
    gpus: a.gpus + b.gpus,
  };
}

/** What is left of `a` without `b`. */
export function subtractUsage(a: WorkspaceUsage, b: WorkspaceUsage): WorkspaceUsage {
  return {
    containers: a.containers - b.containers,
    cpuMillicores: a.cpuMillicores - b.cpuMillicores,
    memoryBytes: a.memoryBytes - b.memoryBytes,
    gpus: a.gpus - b.gpus,
  };
}

export type QuotaCheck = { ok: true } | { ok: false; limit: keyof ContainerLimits; reason: string };

const fmtMb = (bytes: number) => `${Math.ceil(bytes / MiB)} MiB`;

/**
 * Whether one more container of `req` fits the workspace's limits beside
 * `usage`; when not, which limit and why (the first one exceeded, in the
 * order containers, CPU, memory, GPUs).
 */
export function fitsLimits(
  limits: ContainerLimits,
  usage: WorkspaceUsage,
  req: PlacementRequest,
): QuotaCheck {
  const { maxContainers, maxCpuMillicores, maxMemoryMb, maxGpus } = limits;
  if (maxContainers !== null && usage.containers + 1 > maxContainers)
    return {
      ok: false,
      limit: "maxContainers",
      reason: `the workspace runs ${usage.containers} of its ${maxContainers} containers (limit max_containers)`,
    };
  if (maxCpuMillicores !== null && usage.cpuMillicores + req.cpuMillicores > maxCpuMillicores)
    return {
      ok: false,
      limit: "maxCpuMillicores",
      reason: `the workspace's containers hold ${usage.cpuMillicores}m of its ${maxCpuMillicores}m CPU and one more needs ${req.cpuMillicores}m (limit max_cpu_millicores)`,
    };
  if (maxMemoryMb !== null && usage.memoryBytes + req.memoryBytes > maxMemoryMb * MiB)
    return {
      ok: false,
      limit: "maxMemoryMb",
      reason: `the workspace's containers hold ${fmtMb(usage.memoryBytes)} of its ${maxMemoryMb} MiB memory and one more needs ${fmtMb(req.memoryBytes)} (limit max_memory_mb)`,
    };
  if (maxGpus !== null && req.gpuCount > 0 && usage.gpus + req.gpuCount > maxGpus)
    return {
      ok: false,
      limit: "maxGpus",
      reason: `the workspace's containers hold ${usage.gpus} of its ${maxGpus} GPUs and one more needs ${req.gpuCount} (limit max_gpus)`,
    };
  return { ok: true };
}

/**
 * Whether a request of a single container could ever fit, however little
 * the workspace ran: false means waiting will not help (a container bigger
 * than the limit itself).
 */
export function everFitsLimits(limits: ContainerLimits, req: PlacementRequest): boolean {
  return fitsLimits(limits, NO_USAGE, req).ok;
}
