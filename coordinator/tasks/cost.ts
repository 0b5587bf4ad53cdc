// The per-task cost estimate of the spec's Task section: duration (ended_at
// minus started_at) times per-second rates of the requested CPU, memory and
// GPU. Operators set the rates (coordinator config `costRates`); all are 0
// until they do, so an unconfigured cluster reports a cost of 0, never a guess.

import { BerthError } from "../../shared/errors.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import { cpuMillicores, gpuWish } from "../scheduler/index.ts";

/** Cost rates as written in the coordinator's config file. */
export interface CostRatesOptions {
  /** Per requested CPU core per second. @default 0 */
  cpuCorePerSecond?: number;
  /** Per requested GiB of memory per second. @default 0 */
  memoryGibPerSecond?: number;
  /**
   * Per requested GPU per second, by GPU type (as stubs name them, e.g.
   * "A100-80"; matched without regard to case) with `default` for the others.
   * @default { default: 0 }
   */
  gpuPerSecond?: Record<string, number>;
  /** A label for the figures, e.g. "USD". @default none */
  currency?: string;
}

export interface CostRates {
  cpuCorePerSecond: number;
  memoryGibPerSecond: number;
  /** Keys in lower case; always has `default`. */
  gpuPerSecond: Record<string, number>;
  currency?: string;
}

/** What a task asked for (its stub's config and extra). */
export interface RequestedResources {
  cpuCores: number;
  memoryGib: number;
  /** GPU types in priority order; empty when none. */
  gpuTypes: string[];
  gpuCount: number;
}

export interface TaskCost {
  /** cpu + memory + gpu, rounded to 6 decimal places. */
  estimate: number;
  currency?: string;
  cpu: number;
  memory: number;
  gpu: number;
  /** Seconds between started_at and ended_at (or now, while it runs). */
  duration_seconds: number;
  /** GPUs held times duration_seconds (GPU-seconds): 0 for a task without GPUs. */
  gpu_seconds: number;
  /** false while the task runs: the figures grow until it ends. */
  final: boolean;
  /** The rates applied: gpu_per_second is the rate of the GPU type used for the estimate. */
  rates: { cpu_core_per_second: number; memory_gib_per_second: number; gpu_per_second: number };
}

const rate = (where: string, v: unknown): number => {
  if (v === undefined) return 0;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
    throw new BerthError(
      "invalid_request",
      `coordinator config: costRates.${where} must be a number >= 0, got ${JSON.stringify(v)}`,
    );
  }
  return v;
};

/** Validates the configured rates once at start-up; absent ones are 0. */
export function resolveCostRates(o: CostRatesOptions | undefined): CostRates {
  if (o !== undefined && (typeof o !== "object" || o === null || Array.isArray(o))) {
    throw new BerthError("invalid_request", "coordinator config: costRates must be an object");
  }
  const gpuIn = o?.gpuPerSecond ?? {};
  if (typeof gpuIn !== "object" || gpuIn === null || Array.isArray(gpuIn)) {
    throw new BerthError(
      "invalid_request",
      'coordinator config: costRates.gpuPerSecond must be an object such as {"default": 0.0005, "A100-80": 0.001}',
    );
  }
  const gpuPerSecond: Record<string, number> = { default: 0 };
  for (const [type, v] of Object.entries(gpuIn))
    gpuPerSecond[type.toLowerCase()] = rate(`gpuPerSecond.${type}`, v);
  if (o?.currency !== undefined && (typeof o.currency !== "string" || o.currency.trim() === "")) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: costRates.currency must be a non-empty string",
    );
  }
  return {
    cpuCorePerSecond: rate("cpuCorePerSecond", o?.cpuCorePerSecond),
    memoryGibPerSecond: rate("memoryGibPerSecond", o?.memoryGibPerSecond),
    gpuPerSecond,
    ...(o?.currency ? { currency: o.currency.trim() } : {}),
  };
}

/** What the stub requests: cores (exact, from millicores), memory (runtime.memory is MiB) and GPUs. */
export function requestedResources(stub: { config: StubConfig; extra: StubExtra }): RequestedResources {
  const gpu = gpuWish(stub as Parameters<typeof gpuWish>[0]);
  return {
    cpuCores: cpuMillicores(stub as Parameters<typeof cpuMillicores>[0]) / 1000,
    memoryGib: stub.config.runtime.memory / 1024,
    gpuTypes: gpu.types,
    gpuCount: gpu.count,
  };
}

/**
 * The per-GPU rate for a request: the first requested type (priority order)
 * with a rate of its own, else `default`. Which type the task really got is
 * not recorded on the task, so the estimate takes the type it asked for first.
 */
export function gpuRate(rates: CostRates, types: string[]): number {
  for (const t of types) {
    const r = rates.gpuPerSecond[t.toLowerCase()];
    if (r !== undefined) return r;
  }
  return rates.gpuPerSecond.default ?? 0;
}

const round6 = (n: number) => Math.round(n * 1e6) / 1e6;

/**
 * The task's cost estimate; null while it has not started. A running task's
 * duration runs to `now` (ms since epoch) and the result says final: false.
 */
export function estimateTaskCost(
  task: { startedAt: string | null; endedAt: string | null },
  req: RequestedResources,
  rates: CostRates,
  now: number = Date.now(),
): TaskCost | null {
  if (!task.startedAt) return null;
  const start = Date.parse(task.startedAt);
  const end = task.endedAt ? Date.parse(task.endedAt) : now;
  if (!Number.isFinite(start) || !Number.isFinite(end)) return null;
  const seconds = Math.max(0, end - start) / 1000;
  const perGpu = gpuRate(rates, req.gpuTypes);
  const cpu = seconds * req.cpuCores * rates.cpuCorePerSecond;
  const memory = seconds * req.memoryGib * rates.memoryGibPerSecond;
  const gpu = seconds * req.gpuCount * perGpu;
  return {
    estimate: round6(cpu + memory + gpu),
    ...(rates.currency ? { currency: rates.currency } : {}),
    cpu: round6(cpu),
    memory: round6(memory),
    gpu: round6(gpu),
    duration_seconds: seconds,
    gpu_seconds: round6(seconds * req.gpuCount),
    final: task.endedAt !== null,
    rates: {
      cpu_core_per_second: rates.cpuCorePerSecond,
      memory_gib_per_second: rates.memoryGibPerSecond,
      gpu_per_second: perGpu,
    },
  };
}

/** No rates configured: every figure 0. */
export const ZERO_COST_RATES: CostRates = Object.freeze({
  cpuCorePerSecond: 0,
  memoryGibPerSecond: 0,
  gpuPerSecond: Object.freeze({ default: 0 }) as Record<string, number>,
}) as CostRates;
