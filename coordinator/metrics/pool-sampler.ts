import type { Logger } from "pino";
import type { LiveAgent } from "../fleet/index.ts";
import type { MetricsRepo, PoolSampleRow } from "./store.ts";
import type { LatestRound } from "./ingest.ts";

// Every interval, per pool (agent group): what the ready agents offer, what
// their containers were given, and what those containers use. Several
// coordinators may run this loop; the (pool, interval) key lets one row in.
// Agents that sent no metrics round yet count toward pool "default" with
// nothing allocated. Also prunes samples older than the retention.

export const DEFAULT_POOL = "default";

export interface PoolSamplerOptions {
  repo: Pick<MetricsRepo, "claimPoolSample" | "prune">;
  /** The live fleet (FleetView.ready). */
  agents: () => LiveAgent[];
  latest: (agentId: string) => LatestRound | undefined;
  coordinatorId: string;
  /** @default 15000 */
  intervalMs?: number;
  /** Samples older than this are deleted. @default 7 days */
  retentionMs?: number;
  /** How often pruning runs. @default 10 minutes */
  pruneEveryMs?: number;
  log: Pick<Logger, "warn" | "info">;
  clock?: () => number;
}

export const DEFAULT_POOL_INTERVAL_MS = 15_000;
export const DEFAULT_METRICS_RETENTION_MS = 7 * 24 * 3_600_000;

/** One pool's figures from the fleet and the agents' latest rounds. Rounds older than 3 of their intervals count as nothing. */
export function poolFigures(
  agents: LiveAgent[],
  latest: (agentId: string) => LatestRound | undefined,
  now: number,
): Map<string, Omit<PoolSampleRow, "pool" | "bucketMs" | "atMs" | "coordinatorId">> {
  const pools = new Map<string, Omit<PoolSampleRow, "pool" | "bucketMs" | "atMs" | "coordinatorId">>();
  for (const a of agents) {
    const l = latest(a.agentId);
    const fresh = l && now - l.receivedAt <= 3 * Math.max(l.round.intervalMs, 1000) ? l.round : undefined;
    const pool = l?.round.pool ?? DEFAULT_POOL;
    const p = pools.get(pool) ?? {
      agents: 0,
      cpuCapacityCores: 0,
      cpuAllocatedCores: 0,
      cpuUsedCores: 0,
      memoryCapacityBytes: 0,
      memoryAllocatedBytes: 0,
      memoryUsedBytes: 0,
      gpuCapacity: 0,
      gpuAllocated: 0,
    };
    const cap = a.heartbeat.capacity;
    p.agents += 1;
    p.cpuCapacityCores += cap.cpuCores;
    p.memoryCapacityBytes += cap.memoryBytes;
    p.gpuCapacity += cap.gpus.available ? cap.gpus.devices.length : 0;
    if (fresh) {
      p.cpuAllocatedCores += fresh.allocated.cpuCores;
      p.memoryAllocatedBytes += fresh.allocated.memoryBytes;
      p.gpuAllocated += fresh.allocated.gpus;
      for (const c of fresh.containers) {
        p.cpuUsedCores += c.cpuCores;
        p.memoryUsedBytes += c.memoryBytes;
      }
    }
    pools.set(pool, p);
  }
  return pools;
}

export class PoolSampler {
  private readonly intervalMs: number;
  private readonly retentionMs: number;
  private readonly pruneEveryMs: number;
  private readonly clock: () => number;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private lastPruneAt = 0;

  constructor(private readonly o: PoolSamplerOptions) {
    this.intervalMs = o.intervalMs ?? DEFAULT_POOL_INTERVAL_MS;
    this.retentionMs = o.retentionMs ?? DEFAULT_METRICS_RETENTION_MS;
    this.pruneEveryMs = o.pruneEveryMs ?? 600_000;
    this.clock = o.clock ?? Date.now;
  }

  start(): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.tick()
        .then(() => {})
        .catch((err: unknown) => this.o.log.warn({ err }, "pool metrics not written"))
        .finally(() => {
          this.running = undefined;
        });
    }, this.intervalMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** Writes this interval's row of every pool this coordinator is first to; returns the pools it wrote. */
  async tick(): Promise<string[]> {
    const now = this.clock();
    const bucketMs = Math.floor(now / this.intervalMs) * this.intervalMs;
    const written: string[] = [];
    for (const [pool, f] of poolFigures(this.o.agents(), this.o.latest, now)) {
      const row = { pool, bucketMs, atMs: now, coordinatorId: this.o.coordinatorId, ...f };
      if (await this.o.repo.claimPoolSample(row)) written.push(pool);
    }
    if (now - this.lastPruneAt >= this.pruneEveryMs) {
      this.lastPruneAt = now;
      const gone = await this.o.repo.prune(now - this.retentionMs);
      if (gone.containerSamples + gone.poolSamples > 0) this.o.log.info(gone, "pruned old metrics samples");
    }
    return written;
  }
}
