// What this host can offer: CPU, memory, the disk under the agent's data
// directory, and its GPUs.

import { existsSync, realpathSync, statfsSync, statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, resolve, sep } from "node:path";
import * as si from "systeminformation";
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

function isUnder(path: string, mount: string): boolean {
  if (mount === "/") return true;
  const m = mount.endsWith(sep) ? mount.slice(0, -1) : mount;
  return path === m || path.startsWith(m + sep);
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
 * Total and free bytes of the filesystem holding `dataDir`. The mount is the
 * systeminformation entry whose mount point is the longest prefix of the
 * directory, accepted only if it is the same device: systeminformation leaves
 * out tmpfs and friends, and a prefix alone would then name the wrong
 * filesystem (e.g. "/" for a dataDir on /dev/shm). In that case statfs(2)
 * on the directory gives the numbers. "Free" is what an unprivileged writer
 * may still use (df's Available), so it excludes the root-reserved blocks.
 */
export async function readDiskCapacity(dataDir: string): Promise<HostCapacity["disk"]> {
  const path = nearestExistingPath(dataDir);
  const dev = statSync(path).dev;
  const entries = await si.fsSize();
  const candidates = entries
    .filter((e) => e.mount && isUnder(path, e.mount))
    .sort((a, b) => b.mount.length - a.mount.length);
  const best = candidates[0];
  if (best && existsSync(best.mount) && statSync(best.mount).dev === dev && best.size > 0) {
    return { path: best.mount, totalBytes: best.size, freeBytes: Math.min(best.available, best.size) };
  }
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
  const [cpu, mem, disk, gpus] = await Promise.all([
    si.cpu(),
    si.mem(),
    readDiskCapacity(opts.dataDir).catch((e: unknown) => {
      throw e instanceof BerthError
        ? e
        : new BerthError("unavailable", `cannot read disk capacity for ${opts.dataDir}: ${describeError(e)}`);
    }),
    opts.gpu.probe(),
  ]);
  // si.cpu().cores is the logical count; 0 means it could not read /proc/cpuinfo.
  const cpuCores = cpu.cores > 0 ? cpu.cores : availableParallelism();
  if (!(mem.total > 0))
    throw new BerthError("unavailable", "systeminformation reports no memory on this host");
  return { cpuCores, memoryBytes: mem.total, disk, gpus };
}
