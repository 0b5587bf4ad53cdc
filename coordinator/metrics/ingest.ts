import type { NatsConnection, Subscription } from "nats";
import type { Logger } from "pino";
import { type AgentMetricsMessage, subjects } from "../../shared/subjects.ts";
import type { ContainerSampleRow, MetricsRepo } from "./store.ts";

// Agents' metric rounds, two ways. Every coordinator keeps each agent's
// latest round (the pool sampler reads allocation and use from it); one
// coordinator of the queue group writes each round's container samples, so
// several coordinators do not store one sample several times.

export const METRICS_QUEUE_GROUP = "berth-metrics-ingest";

export interface LatestRound {
  round: AgentMetricsMessage;
  /** ms since epoch, by this coordinator's clock. */
  receivedAt: number;
}

export interface MetricsIngestOptions {
  nats: NatsConnection;
  repo: Pick<MetricsRepo, "insertContainerSamples">;
  log: Pick<Logger, "warn">;
  clock?: () => number;
}

/** Checks the shape of a round from the wire; throws naming what is wrong. */
export function parseMetricsRound(data: Uint8Array): AgentMetricsMessage {
  const m = JSON.parse(new TextDecoder().decode(data)) as AgentMetricsMessage;
  if (typeof m?.agentId !== "string" || typeof m.pool !== "string")
    throw new Error("round without agentId or pool");
  if (!Array.isArray(m.containers) || typeof m.allocated !== "object" || m.allocated === null) {
    throw new Error("round without containers or allocated");
  }
  for (const c of m.containers) {
    if (
      typeof c?.containerId !== "string" ||
      !Number.isFinite(c.cpuCores) ||
      !Number.isFinite(c.memoryBytes)
    ) {
      throw new Error("container sample without containerId, cpuCores or memoryBytes");
    }
  }
  // An older agent sends none; a malformed table is dropped rather than the whole round.
  if (
    m.gpus !== undefined &&
    (!Array.isArray(m.gpus) || !m.gpus.every((g) => typeof g?.uuid === "string" && Number.isInteger(g.index)))
  ) {
    delete m.gpus;
  }
  return m;
}

/** A round as stored rows, stamped with the coordinator's time (agent clocks may be off). */
export function sampleRows(m: AgentMetricsMessage, atMs: number): ContainerSampleRow[] {
  return m.containers.map((c) => {
    const gpus = c.gpus ?? [];
    const util = gpus.map((g) => g.utilizationPercent).filter((v): v is number => v !== null);
    const mem = gpus.map((g) => g.memoryUsedBytes).filter((v): v is number => v !== null);
    return {
      containerId: c.containerId,
      atMs,
      agentId: m.agentId,
      pool: m.pool,
      workspaceId: c.workspaceId ?? null,
      stubId: c.stubId ?? null,
      cpuCores: c.cpuCores,
      memoryBytes: c.memoryBytes,
      cpuLimitCores: c.cpuLimitCores ?? 0,
      memoryLimitBytes: c.memoryLimitBytes ?? 0,
      gpuCount: gpus.length,
      gpuUtilization: util.length > 0 ? util.reduce((s, v) => s + v, 0) / util.length : null,
      gpuMemoryBytes: mem.length > 0 ? mem.reduce((s, v) => s + v, 0) : null,
    };
  });
}

export class MetricsIngest {
  private readonly latestByAgent = new Map<string, LatestRound>();
  private subs: Subscription[] = [];
  private readonly writes = new Set<Promise<void>>();
  private readonly clock: () => number;

  constructor(private readonly o: MetricsIngestOptions) {
    this.clock = o.clock ?? Date.now;
  }

  start(): void {
    const all = this.o.nats.subscribe(subjects.allMetrics);
    const mine = this.o.nats.subscribe(subjects.allMetrics, { queue: METRICS_QUEUE_GROUP });
    this.subs = [all, mine];
    void this.consume(all, (m) => {
      this.latestByAgent.set(m.agentId, { round: m, receivedAt: this.clock() });
    });
    void this.consume(mine, (m) => {
      const write = this.o.repo
        .insertContainerSamples(sampleRows(m, this.clock()))
        .catch((err: unknown) => this.o.log.warn({ err, agentId: m.agentId }, "container samples not stored"))
        .finally(() => this.writes.delete(write));
      this.writes.add(write);
    });
  }

  /** Stops receiving and waits for the writes in progress. */
  async stop(): Promise<void> {
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
    await Promise.allSettled([...this.writes]);
  }

  latest(agentId: string): LatestRound | undefined {
    return this.latestByAgent.get(agentId);
  }

  /** Resolves when every write begun so far has ended (for tests and shutdown). */
  async flushed(): Promise<void> {
    await Promise.allSettled([...this.writes]);
  }

  private async consume(sub: Subscription, handle: (m: AgentMetricsMessage) => void): Promise<void> {
    for await (const msg of sub) {
      try {
        const m = parseMetricsRound(msg.data);
        // berth.agent.{agentId}.metrics: a round speaks for the agent its subject names.
        if (msg.subject.split(".")[2] !== m.agentId)
          throw new Error(`round of ${m.agentId} on ${msg.subject}`);
        handle(m);
      } catch (err) {
        this.o.log.warn(
          { err: (err as Error).message, subject: msg.subject },
          "ignoring a bad metrics round",
        );
      }
    }
  }
}
