// What the running containers of this host hold: CPU, memory and GPUs.
// Pure bookkeeping: a reservation is taken synchronously (before the first
// await of runContainer), so two concurrent requests can never both fit in
// the same free space.

import { BerthError } from "../../shared/errors.ts";
import { type GpuDevice, type GpuReport, gpuSchedulingType } from "../../shared/fleet.ts";
import type { GpuRequest } from "../../api/index.ts";

export interface HostResources {
  cpuCores: number;
  memoryBytes: number;
}

export interface Allocation {
  cpu: number;
  memoryBytes: number;
  /** UUIDs held: exclusively, or for a share of a shared GPU (with gpuMemoryMiB). */
  gpus: string[];
  /** MiB of the shared GPU in `gpus` this container holds. */
  gpuMemoryMiB?: number;
}

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

/** "1.5 GiB", "512 MiB", "12345 bytes": for refusal messages. */
export function formatBytes(n: number): string {
  if (n >= GiB) return `${+(n / GiB).toFixed(2)} GiB`;
  if (n >= MiB) return `${+(n / MiB).toFixed(1)} MiB`;
  return `${n} bytes`;
}

const cores = (n: number) => `${+n.toFixed(2)} ${n === 1 ? "core" : "cores"}`;

export class Allocations {
  private readonly held = new Map<string, Allocation>();

  /**
   * @param cpuOvercommit how many times the host's cores may be handed out
   *   (CFS quotas keep each container to its share either way; 1 = never more
   *   than the host has).
   */
  constructor(private readonly cpuOvercommit = 1) {}

  get(id: string): Allocation | undefined {
    return this.held.get(id);
  }

  totals(): Allocation {
    const t: Allocation = { cpu: 0, memoryBytes: 0, gpus: [] };
    for (const a of this.held.values()) {
      t.cpu += a.cpu;
      t.memoryBytes += a.memoryBytes;
      t.gpus.push(...a.gpus);
    }
    return t;
  }

  /** GPUs held by any container. */
  heldGpus(): Set<string> {
    return new Set(this.totals().gpus);
  }

  /** MiB held on each shared GPU, by uuid. */
  sharedGpuUse(): Map<string, number> {
    const use = new Map<string, number>();
    for (const a of this.held.values()) {
      if (a.gpuMemoryMiB === undefined) continue;
      for (const u of a.gpus) use.set(u, (use.get(u) ?? 0) + a.gpuMemoryMiB);
    }
    return use;
  }

  /** Refuses with resource_exhausted (saying what is free) when the request does not fit. */
  checkFits(host: HostResources, want: { cpu: number; memoryBytes: number }): void {
    const used = this.totals();
    const cpuTotal = host.cpuCores * this.cpuOvercommit;
    const cpuFree = Math.max(0, cpuTotal - used.cpu);
    // A tiny epsilon: 0.1 + 0.2 must fit in 0.3.
    if (want.cpu > cpuFree + 1e-9) {
      const over = this.cpuOvercommit === 1 ? "" : ` x${this.cpuOvercommit} overcommit`;
      throw new BerthError(
        "resource_exhausted",
        `asked for ${cores(want.cpu)}, this host has ${cores(host.cpuCores)}${over} (${cores(cpuFree)} free)`,
        { resource: "cpu", requested: want.cpu, total: cpuTotal, free: cpuFree },
      );
    }
    const memFree = Math.max(0, host.memoryBytes - used.memoryBytes);
    if (want.memoryBytes > memFree) {
      throw new BerthError(
        "resource_exhausted",
        `asked for ${formatBytes(want.memoryBytes)} of memory, this host has ${formatBytes(host.memoryBytes)} (${formatBytes(memFree)} free)`,
        { resource: "memory", requested: want.memoryBytes, total: host.memoryBytes, free: memFree },
      );
    }
  }

  /** Records an allocation; the caller checked it fits. Replaces any earlier one for the id. */
  hold(id: string, a: Allocation): void {
    this.held.set(id, {
      cpu: a.cpu,
      memoryBytes: a.memoryBytes,
      gpus: [...a.gpus],
      ...(a.gpuMemoryMiB !== undefined ? { gpuMemoryMiB: a.gpuMemoryMiB } : {}),
    });
  }

  free(id: string): void {
    this.held.delete(id);
  }
}

/** A device is busy when it, its MIG parent, or one of its MIG instances is held. */
function isBusy(d: GpuDevice, held: Set<string>, devices: readonly GpuDevice[]): boolean {
  if (held.has(d.uuid)) return true;
  if (d.mig && held.has(d.mig.parentUuid)) return true;
  return devices.some((o) => o.mig?.parentUuid === d.uuid && held.has(o.uuid));
}

const sameType = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/**
 * Picks `req.count` free GPUs for one container. With a type list, the first
 * type with enough free devices wins (one type per container); a type names
 * whole GPUs ("A100") or MIG slices of one profile ("A100:1g.10gb"), never
 * both. With none, any single whole-GPU type with enough, else any free
 * whole GPUs: a slice is only ever given to a request that names it. Lowest
 * index first. Refuses with resource_exhausted and the reason when nothing
 * fits.
 */
export function pickGpus(
  report: GpuReport | undefined,
  req: GpuRequest | undefined,
  held: Set<string>,
  sharedUse: ReadonlyMap<string, number> = new Map(),
): GpuDevice[] {
  const count = req?.count ?? 0;
  if (count === 0) return [];
  if (req?.memoryMiB !== undefined) return [pickSharedGpu(report, req, req.memoryMiB, sharedUse)];
  const want = `${count} GPU${count === 1 ? "" : "s"}`;
  if (!report?.available || report.devices.length === 0) {
    const why = report?.reason ? `: ${report.reason}` : "";
    throw new BerthError("resource_exhausted", `asked for ${want}, this host has none${why}`, {
      resource: "gpu",
      requested: count,
      total: 0,
    });
  }
  // A shared GPU is only ever given by memory (pickSharedGpu), never whole.
  const all = report.devices.filter((d) => !d.shared);
  const free = all.filter((d) => !isBusy(d, held, all)).sort((a, b) => a.index - b.index);
  const types = req?.types ?? [];
  const isType = (d: GpuDevice, type: string) => sameType(gpuSchedulingType(d), type);
  if (types.length > 0) {
    for (const type of types) {
      const ofType = free.filter((d) => isType(d, type));
      if (ofType.length >= count) return ofType.slice(0, count);
    }
    const have = types
      .map((type) => {
        const total = all.filter((d) => isType(d, type)).length;
        const n = free.filter((d) => isType(d, type)).length;
        return `${type}: ${total} (${n} free)`;
      })
      .join(", ");
    throw new BerthError(
      "resource_exhausted",
      `asked for ${want} of type ${types.join(" or ")}, this host has ${have}`,
      { resource: "gpu", requested: count, types },
    );
  }
  const whole = all.filter((d) => !d.mig);
  const freeWhole = free.filter((d) => !d.mig);
  const byType = new Map<string, GpuDevice[]>();
  for (const d of freeWhole) byType.set(d.type, [...(byType.get(d.type) ?? []), d]);
  for (const list of byType.values()) if (list.length >= count) return list.slice(0, count);
  if (freeWhole.length >= count) return freeWhole.slice(0, count);
  const slices = all.length - whole.length;
  throw new BerthError(
    "resource_exhausted",
    `asked for ${want}, this host has ${whole.length} (${freeWhole.length} free)` +
      (slices > 0 ? `; its ${slices} MIG slice(s) are given only to requests naming their profile` : ""),
    { resource: "gpu", requested: count, total: whole.length, free: freeWhole.length },
  );
}

/**
 * The shared GPU for `memoryMiB` of one: of the shared GPUs of the first
 * type that has room (any type without a list), the one it leaves the least
 * free memory on, so shares pack onto GPUs in use (the planner's best fit).
 * Refuses with resource_exhausted naming what the host shares and has free.
 */
export function pickSharedGpu(
  report: GpuReport | undefined,
  req: GpuRequest,
  memoryMiB: number,
  sharedUse: ReadonlyMap<string, number>,
): GpuDevice {
  const want = `${formatBytes(memoryMiB * MiB)} of a shared GPU`;
  const shared = report?.available ? report.devices.filter((d) => d.shared) : [];
  if (shared.length === 0) {
    throw new BerthError(
      "resource_exhausted",
      `asked for ${want}, this host shares no GPU (berth agent --shared-gpus)`,
      { resource: "gpu_memory", requested: memoryMiB },
    );
  }
  const freeOf = (d: GpuDevice) => d.memoryMiB - (sharedUse.get(d.uuid) ?? 0);
  const types = req.types ?? [];
  for (const type of types.length > 0 ? types : [undefined]) {
    let best: GpuDevice | undefined;
    for (const d of shared) {
      if ((type !== undefined && !sameType(d.type, type)) || freeOf(d) < memoryMiB) continue;
      if (!best || freeOf(d) < freeOf(best) || (freeOf(d) === freeOf(best) && d.index < best.index)) best = d;
    }
    if (best) return best;
  }
  const have = shared
    .map(
      (d) =>
        `${d.type} ${d.index}: ${formatBytes(freeOf(d) * MiB)} free of ${formatBytes(d.memoryMiB * MiB)}`,
    )
    .join(", ");
  throw new BerthError(
    "resource_exhausted",
    `asked for ${want}${types.length > 0 ? ` of type ${types.join(" or ")}` : ""}, this host's shared GPUs have ${have}`,
    { resource: "gpu_memory", requested: memoryMiB },
  );
}
