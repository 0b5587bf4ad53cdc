// What the scheduler's randomized tests and bench/scheduler share: a small
// deterministic PRNG (mulberry32, so a failure or a figure names the seed
// that reproduces it) and bench/scheduler's fleet shape (70% CPU hosts,
// 20% 8x H100, 10% 4x A10G), so the planner is tested on the fleet it is
// measured on.

import type { HostCapacity } from "../../shared/fleet.ts";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

/** mulberry32: numbers in [0, 1) from a 32-bit seed. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** mulberry32 with an integer in [lo, hi] and a pick from a list. */
export function rng(seed: number) {
  const next = mulberry32(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[int(0, xs.length - 1)] as T;
  return { next, int, pick };
}
export type Rng = ReturnType<typeof rng>;

export interface BenchHostOptions {
  /** Every 13th host (i % 13 === 5) has mixed GPU types, every other one of those GPUs the agent does not offer. */
  odd?: boolean;
  /** Each GPU's memory. @default 81559 (an H100's) */
  gpuMemoryMiB?: number;
  disk?: HostCapacity["disk"];
}

/** Host i of bench/scheduler's fleet: 70% CPU hosts (32 cores, 128 GiB), 20% 8x H100 (96 cores, 1 TiB), 10% 4x A10G (48 cores, 192 GiB). */
export function benchHostCapacity(i: number, o: BenchHostOptions = {}): HostCapacity {
  const kind = i % 10;
  const disk = o.disk ?? { path: "/var/lib/berth-agent", totalBytes: 1e12, freeBytes: 5e11 };
  const gpus = (type: string, n: number) =>
    Array.from({ length: n }, (_, k) => ({
      index: k,
      uuid: `GPU-${i}-${k}`,
      model: type,
      type,
      memoryMiB: o.gpuMemoryMiB ?? 81559,
    }));
  if (o.odd && i % 13 === 5) {
    const devices = [...gpus("L4", 2), ...gpus("A10G", 1).map((d) => ({ ...d, uuid: `${d.uuid}-a` }))];
    return {
      cpuCores: 24,
      memoryBytes: 96 * GiB + (i % 3) * MiB,
      disk,
      gpus: { available: i % 2 === 0, toolkit: true, devices },
    };
  }
  const devices = kind < 7 ? [] : kind < 9 ? gpus("H100", 8) : gpus("A10G", 4);
  return {
    cpuCores: kind < 7 ? 32 : kind < 9 ? 96 : 48,
    memoryBytes: (kind < 7 ? 128 : kind < 9 ? 1024 : 192) * GiB,
    disk,
    gpus: { available: devices.length > 0, toolkit: true, devices },
  };
}
