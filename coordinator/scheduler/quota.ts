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
  /**
   * GPUs held at once by type ("A100": 2); a type not named has no limit of
   * its own. A key names a scheduling type ("A100:1g.10gb") or a GPU model,
   * which then also counts its MIG slices; matched without regard to case.
   * @default none
   */
  maxGpusByType?: Readonly<Record<string, number>> | null;
}

/** What a workspace's containers hold now. */
export interface WorkspaceUsage {
  containers: number;
  cpuMillicores: number;
  memoryBytes: number;
  gpus: number;
  /** GPUs by the type each reservation holds (a type with none left out). @default none */
  gpusByType?: Record<string, number>;
}

export const NO_USAGE: WorkspaceUsage = { containers: 0, cpuMillicores: 0, memoryBytes: 0, gpus: 0 };

const MiB = 1024 * 1024;

/** The sum of the reservations of one workspace's containers. */
export function usageOf(
  reservations: readonly Pick<Reservation, "cpuMillicores" | "memoryBytes" | "gpuCount" | "gpuType">[],
): WorkspaceUsage {
  const u: WorkspaceUsage = { ...NO_USAGE };
  for (const r of reservations) {
    u.containers++;
    u.cpuMillicores += r.cpuMillicores;
    u.memoryBytes += r.memoryBytes;
    u.gpus += r.gpuCount;
    if (r.gpuType && r.gpuCount > 0) addGpusByType(u, r.gpuType, r.gpuCount);
  }
  return u;
}

/** Adds (or with a negative count, takes away) `count` GPUs of `type` to `u` in place. */
export function addGpusByType(u: WorkspaceUsage, type: string, count: number): void {
  u.gpusByType ??= {};
  const n = (u.gpusByType[type] ?? 0) + count;
  if (n === 0) delete u.gpusByType[type];
  else u.gpusByType[type] = n;
}

function combineByType(
  a: WorkspaceUsage,
  b: WorkspaceUsage,
  sign: 1 | -1,
): Record<string, number> | undefined {
  if (!a.gpusByType && !b.gpusByType) return undefined;
  const u: WorkspaceUsage = { ...NO_USAGE, gpusByType: { ...a.gpusByType } };
  for (const [type, n] of Object.entries(b.gpusByType ?? {})) addGpusByType(u, type, sign * n);
  return u.gpusByType;
}

/** Two usages together. */
export function addUsage(a: WorkspaceUsage, b: WorkspaceUsage): WorkspaceUsage {
  const byType = combineByType(a, b, 1);
  return {
    containers: a.containers + b.containers,
    cpuMillicores: a.cpuMillicores + b.cpuMillicores,
    memoryBytes: a.memoryBytes + b.memoryBytes,
    gpus: a.gpus + b.gpus,
    ...(byType ? { gpusByType: byType } : {}),
  };
}

/** What is left of `a` without `b`. */
export function subtractUsage(a: WorkspaceUsage, b: WorkspaceUsage): WorkspaceUsage {
  const byType = combineByType(a, b, -1);
  return {
    containers: a.containers - b.containers,
    cpuMillicores: a.cpuMillicores - b.cpuMillicores,
    memoryBytes: a.memoryBytes - b.memoryBytes,
    gpus: a.gpus - b.gpus,
    ...(byType ? { gpusByType: byType } : {}),
  };
}

/** The model a scheduling type is of: "A100:1g.10gb" → "A100". */
const modelOf = (type: string) => type.split(":")[0] ?? type;

/** Whether a per-type limit's key covers a GPU type (the type itself, or its model for a MIG slice). */
const covers = (key: string, type: string) => {
  const k = key.toUpperCase();
  return k === type.toUpperCase() || k === modelOf(type).toUpperCase();
};

/** GPUs the workspace holds that the per-type limit `key` counts. */
export function gpusOfType(usage: WorkspaceUsage, key: string): number {
  let n = 0;
  for (const [type, count] of Object.entries(usage.gpusByType ?? {})) if (covers(key, type)) n += count;
  return n;
}

/**
 * Whether `count` more GPUs of `type` fit every per-type limit covering it;
 * when not, the first limit that says no, with what it holds.
 */
function typeRefusal(
  byType: Readonly<Record<string, number>>,
  usage: WorkspaceUsage,
  type: string,
  count: number,
): { key: string; max: number; held: number } | undefined {
  for (const [key, max] of Object.entries(byType)) {
    if (!covers(key, type)) continue;
    const held = gpusOfType(usage, key);
    if (held + count > max) return { key, max, held };
  }
  return undefined;
}

const typeReason = (r: { key: string; max: number; held: number }, count: number) =>
  `the workspace's containers hold ${r.held} of its ${r.max} ${r.key} GPUs and one more needs ${count} (limit max_gpus_by_type ${r.key})`;

const hasTypeLimits = (
  limits: ContainerLimits,
): limits is ContainerLimits & {
  maxGpusByType: Readonly<Record<string, number>>;
} => !!limits.maxGpusByType && Object.keys(limits.maxGpusByType).length > 0;

/**
 * The request narrowed to the GPU types its per-type limits still allow
 * beside `usage`: unchanged when no such limit applies; for a request of any
 * type, the fleet's types (`fleetTypes`, read only then) less those at their
 * limit; a refusal naming the limit when no type is left.
 */
export function withinTypeLimits(
  limits: ContainerLimits,
  usage: WorkspaceUsage,
  req: PlacementRequest,
  fleetTypes: () => string[],
): { ok: true; placement: PlacementRequest } | { ok: false; limit: "maxGpusByType"; reason: string } {
  if (!hasTypeLimits(limits) || req.gpuCount <= 0) return { ok: true, placement: req };
  const byType = limits.maxGpusByType;
  const wanted = req.gpuTypes.length > 0 ? req.gpuTypes : fleetTypes();
  const allowed = wanted.filter((t) => !typeRefusal(byType, usage, t, req.gpuCount));
  if (allowed.length === wanted.length && req.gpuTypes.length > 0) return { ok: true, placement: req };
  if (allowed.length === 0) {
    // Named: the first wanted type's limit, or for "any" the first limit reached.
    const first =
      wanted.map((t) => typeRefusal(byType, usage, t, req.gpuCount)).find((r) => r !== undefined) ??
      Object.entries(byType)
        .map(([key, max]) => ({ key, max, held: gpusOfType(usage, key) }))
        .find((r) => r.held + req.gpuCount > r.max);
    if (first) return { ok: false, limit: "maxGpusByType", reason: typeReason(first, req.gpuCount) };
    // No fleet type to narrow to: place() says there is no GPU.
    return { ok: true, placement: req };
  }
  if (req.gpuTypes.length === 0 && allowed.length === wanted.length) return { ok: true, placement: req };
  return { ok: true, placement: { ...req, gpuTypes: allowed } };
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
  if (hasTypeLimits(limits) && req.gpuCount > 0 && req.gpuTypes.length > 0) {
    // Every type the request accepts is at its limit (for "any", withinTypeLimits decides on the fleet's types).
    const refusals = req.gpuTypes.map((t) => typeRefusal(limits.maxGpusByType, usage, t, req.gpuCount));
    const first = refusals[0];
    if (first && refusals.every((r) => r !== undefined))
      return { ok: false, limit: "maxGpusByType", reason: typeReason(first, req.gpuCount) };
  }
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
