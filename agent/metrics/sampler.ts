import { BerthError } from "../../shared/errors.ts";
import type { AgentMetricsMessage, ContainerMetricsSample, GpuTelemetry } from "../../shared/subjects.ts";
import type { TelemetryResult } from "../capacity/gpu-telemetry.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import type { CgroupLayout } from "../runtime/index.ts";
import { coresBetween, readCgroupSample } from "./cgroup-usage.ts";
import type { GpuUsage, GpuUsageReader } from "./gpu-usage.ts";
import type { AgentMetricsRegistry, HostCapacityFigures } from "./registry.ts";

/** A running container as the sampler needs it (the container host's status plus its cgroup path). */
export interface SampledContainer {
  id: string;
  labels: Record<string, string>;
  /** Assigned GPU uuids. */
  gpus: string[];
  cpu: number;
  memoryBytes: number;
  /** ms since epoch; the first sample's CPU is averaged from here. */
  startedAt?: number;
  /** Relative to each hierarchy's mount, as runc was given it. */
  cgroupsPath: string;
}

export interface MetricsSamplerOptions {
  agentId: string;
  /** @default "default" */
  pool?: string;
  /** Between sample rounds. @default 10000 */
  intervalMs?: number;
  cgroups: CgroupLayout;
  /** Running containers; an empty list on an agent that runs none. */
  containers: () => Promise<SampledContainer[]>;
  /** Absent: no GPU figures. */
  gpus?: Pick<GpuUsageReader, "read">;
  /**
   * Every GPU of the host, read each round (the GPU monitor of
   * agent/capacity): the round carries the table and containers' GPU
   * figures come from it. When set, `gpus` is not read.
   */
  gpuTelemetry?: { read(): Promise<TelemetryResult | "absent"> };
  capacity?: () => Promise<HostCapacityFigures>;
  registry?: AgentMetricsRegistry;
  /** Called with every round (the agent publishes it on NATS). */
  publish?: (round: AgentMetricsMessage) => void;
  warn?: (message: string) => void;
  clock?: () => number;
}

export const DEFAULT_METRICS_INTERVAL_MS = 10_000;

/** Reads every running container's cgroup (and GPUs) each interval and hands the round on. */
export class MetricsSampler {
  private readonly o: MetricsSamplerOptions & { pool: string; intervalMs: number; clock: () => number };
  private readonly previous = new Map<string, { ns: number; at: number }>();
  private readonly warned = new Set<string>();
  private timer?: NodeJS.Timeout;
  private running?: Promise<unknown>;

  constructor(o: MetricsSamplerOptions) {
    const intervalMs = o.intervalMs ?? DEFAULT_METRICS_INTERVAL_MS;
    if (!Number.isInteger(intervalMs) || intervalMs < 1000) {
      throw new BerthError("invalid_request", `metrics interval must be at least 1 s, got ${intervalMs} ms`);
    }
    this.o = { ...o, pool: o.pool ?? "default", intervalMs, clock: o.clock ?? Date.now };
  }

  start(): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.sample()
        .catch((e: unknown) => this.warnOnce("round", `metrics sample failed: ${(e as Error).message}`))
        .finally(() => {
          this.running = undefined;
        });
    }, this.o.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** One round: reads, records into the registry, publishes, and returns it. */
  async sample(): Promise<AgentMetricsMessage> {
    const list = await this.o.containers();
    const telemetry = await this.readTelemetry();
    const gpuUsage = telemetry
      ? usageOf(telemetry)
      : list.some((c) => c.gpus.length > 0)
        ? await this.readGpus()
        : undefined;
    const at = this.o.clock();
    const samples: ContainerMetricsSample[] = [];
    const seen = new Set<string>();
    for (const c of list) {
      let read: ReturnType<typeof readCgroupSample>;
      try {
        read = readCgroupSample(this.o.cgroups, c.cgroupsPath);
      } catch {
        continue; // exited since it was listed
      }
      seen.add(c.id);
      const prev = this.previous.get(c.id);
      this.previous.set(c.id, { ns: read.cpuUsageNs, at });
      const since = prev ?? (c.startedAt !== undefined ? { ns: 0, at: c.startedAt } : undefined);
      const workspaceId = c.labels[RunnerLabels.workspaceId];
      const stubId = c.labels[RunnerLabels.stubId];
      samples.push({
        containerId: c.id,
        ...(workspaceId ? { workspaceId } : {}),
        ...(stubId ? { stubId } : {}),
        cpuCores: since ? round3(coresBetween(since.ns, since.at, read.cpuUsageNs, at)) : 0,
        memoryBytes: read.memoryBytes,
        cpuLimitCores: c.cpu,
        memoryLimitBytes: c.memoryBytes,
        ...(gpuUsage && c.gpus.length > 0 ? { gpus: c.gpus.map((uuid) => gpuFigures(uuid, gpuUsage)) } : {}),
      });
    }
    for (const id of this.previous.keys()) if (!seen.has(id)) this.previous.delete(id);
    const round: AgentMetricsMessage = {
      agentId: this.o.agentId,
      pool: this.o.pool,
      at,
      intervalMs: this.o.intervalMs,
      allocated: {
        containers: samples.length,
        cpuCores: round3(samples.reduce((s, c) => s + c.cpuLimitCores, 0)),
        memoryBytes: samples.reduce((s, c) => s + c.memoryLimitBytes, 0),
        gpus: list.filter((c) => seen.has(c.id)).reduce((s, c) => s + c.gpus.length, 0),
      },
      containers: samples,
      ...(telemetry ? { gpus: telemetry } : {}),
    };
    const capacity = this.o.capacity ? await this.o.capacity().catch(() => undefined) : undefined;
    this.o.registry?.record(round, capacity);
    this.o.publish?.(round);
    return round;
  }

  private async readTelemetry(): Promise<GpuTelemetry[] | undefined> {
    if (!this.o.gpuTelemetry) return undefined;
    const r = await this.o.gpuTelemetry.read();
    if (r === "absent") return undefined;
    if (!r.ok) {
      this.warnOnce(`telemetry:${r.reason}`, `GPU telemetry not read: ${r.reason}`);
      return undefined;
    }
    return r.gpus;
  }

  private async readGpus(): Promise<Map<string, GpuUsage> | undefined> {
    if (!this.o.gpus) return undefined;
    const r = await this.o.gpus.read();
    if (r === "absent") return undefined;
    if (!r.ok) {
      this.warnOnce(`gpu:${r.reason}`, `GPU usage not sampled: ${r.reason}`);
      return undefined;
    }
    return r.gpus;
  }

  // A broken driver would otherwise log the same line every round.
  private warnOnce(key: string, message: string): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.o.warn?.(message);
  }
}

function gpuFigures(uuid: string, usage: Map<string, GpuUsage>) {
  const u = usage.get(uuid);
  return { uuid, utilizationPercent: u?.utilizationPercent ?? null, memoryUsedBytes: u?.memoryUsedBytes ?? null };
}

function usageOf(gpus: GpuTelemetry[]): Map<string, GpuUsage> {
  const out = new Map<string, GpuUsage>();
  for (const g of gpus) {
    out.set(g.uuid, {
      utilizationPercent: g.utilizationPercent,
      memoryUsedBytes: g.memoryUsedMiB === null ? null : Math.round(g.memoryUsedMiB * 1024 * 1024),
    });
  }
  return out;
}

const round3 = (n: number) => Math.round(n * 1000) / 1000;
