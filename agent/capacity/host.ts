// What this host can offer: CPU, memory, the disk under the agent's data
// directory, and its GPUs.

import { existsSync, realpathSync, statfsSync, statSync } from "node:fs";
import { availableParallelism, cpus, totalmem } from "node:os";
import { dirname, resolve } from "node:path";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import type { HostCapacity } from "../../shared/fleet.ts";
import type { GpuProbe } from "./gpu-probe.ts";

export interface ReadHostCapacityOptions {
  /** The agent's data directory; it need not exist yet (its nearest existing parent is measured). */
  dataDir: string;
  gpu: GpuProbe;
}

/** The dataDir itself when it exists, else its nearest existing ancestor, with symlinks resolved. */
export function nearestExistingPath(path: string): string {
  let p = resolve(path);
  while (!existsSync(p)) {
    const parent = dirname(p);
    if (parent === p) break;
    p = parent;
  }
  return realpathSync(p);
}

/** The mount point of the filesystem holding `path`: the highest ancestor on the same device. */
function mountPointOf(path: string): string {
  const dev = statSync(path).dev;
  let p = path;
  for (;;) {
    const parent = dirname(p);
    if (parent === p || statSync(parent).dev !== dev) return p;
    p = parent;
  }
}

/**
 * Total and free bytes of the filesystem holding `dataDir` (statfs(2), as df
 * reads them), named by its mount point. "Free" is what an unprivileged
 * writer may still use (df's Available), so it excludes the root-reserved
 * blocks. Read from the kernel directly: a package that lists every mount
 * would cost the agent several MB of memory for these three numbers.
 */
export async function readDiskCapacity(dataDir: string): Promise<HostCapacity["disk"]> {
  const path = nearestExistingPath(dataDir);
  const fs = statfsSync(path);
  const totalBytes = fs.blocks * fs.bsize;
  if (totalBytes <= 0) {
    throw new BerthError("unavailable", `the filesystem holding ${path} reports no size (statfs blocks=0)`);
  }
  return { path: mountPointOf(path), totalBytes, freeBytes: Math.min(fs.bavail * fs.bsize, totalBytes) };
}

/** CPU (logical cores), memory, the data directory's disk and the GPU report, read fresh. */
export async function readHostCapacity(opts: ReadHostCapacityOptions): Promise<HostCapacity> {
  if (!opts.dataDir) throw invalid("readHostCapacity: dataDir must not be empty");
  const [disk, gpus] = await Promise.all([
    readDiskCapacity(opts.dataDir).catch((e: unknown) => {
      throw e instanceof BerthError
        ? e
        : new BerthError("unavailable", `cannot read disk capacity for ${opts.dataDir}: ${describeError(e)}`);
    }),
    opts.gpu.probe(),
  ]);
  // Logical cores; an empty list means /proc/cpuinfo could not be read.
  const cores = cpus().length;
  const cpuCores = cores > 0 ? cores : availableParallelism();
  const memoryBytes = totalmem();
  if (!(memoryBytes > 0)) throw new BerthError("unavailable", "the kernel reports no memory on this host");
  return { cpuCores, memoryBytes, disk, gpus };
}
