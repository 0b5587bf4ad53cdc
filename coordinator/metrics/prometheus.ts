import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { DEFAULT_POOL } from "../../shared/fleet.ts";
import { TASK_STATUSES } from "../../shared/tasks.ts";
import type { AgentState } from "../fleet/index.ts";
import { type AgentGpus, registerGpuGauges } from "./gpu-gauges.ts";

// The coordinator's Prometheus registry (its own, never prom-client's global
// one). Labels are cluster aggregates only: task status, stub type, agent
// state and pool, HTTP method, route pattern and status code; no workspace, stub or
// token appears, so an open /metrics tells nothing about one workspace.

export interface CoordinatorMetricsSources {
  /** Task counts by status (the store's tasks table). */
  taskCounts: () => Promise<Record<string, number>>;
  /** Live containers: the stub each belongs to. */
  containers?: () => { stubId: string }[];
  /** A stub's type (function, endpoint, ...); cached here, as types never change. */
  stubType?: (stubId: string) => Promise<string | undefined>;
  /** The fleet's agents: each one's state and pool. */
  agents: () => { state: AgentState; pool: string }[];
  /** Ready agents' GPUs from their latest metrics rounds (DCGM-named gauges). */
  gpus?: () => AgentGpus[];
  /** @default true */
  processMetrics?: boolean;
}

const AGENT_STATES: AgentState[] = ["ready", "lost", "left"];

export class CoordinatorMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"method" | "route" | "status_code">;
  private readonly durations: Histogram<"method" | "route" | "status_code">;
  private readonly stubTypes = new Map<string, string>();

  constructor(private readonly s: CoordinatorMetricsSources) {
    const registers = [this.registry];
    const self = this;
    new Gauge({
      name: "berth_tasks",
      help: "Tasks in the store by status",
      labelNames: ["status"],
      registers,
      async collect() {
        const counts = await s.taskCounts();
        for (const status of TASK_STATUSES) this.set({ status }, counts[status] ?? 0);
      },
    });
    new Gauge({
      name: "berth_containers",
      help: "Containers this coordinator runs, by stub type",
      labelNames: ["stub_type"],
      registers,
      async collect() {
        this.reset();
        const byType = new Map<string, number>();
        const live = s.containers?.() ?? [];
        const liveStubs = new Set(live.map((c) => c.stubId));
        for (const id of self.stubTypes.keys()) if (!liveStubs.has(id)) self.stubTypes.delete(id);
        for (const c of live) {
          const type = await self.typeOf(c.stubId);
          byType.set(type, (byType.get(type) ?? 0) + 1);
        }
        for (const [stub_type, n] of byType) this.set({ stub_type }, n);
      },
    });
    new Gauge({
      name: "berth_agents",
      help: "Agents in this coordinator's fleet view, by state and pool",
      labelNames: ["state", "pool"],
      registers,
      collect() {
        this.reset();
        const agents = s.agents();
        // Every state of every pool the fleet has (the default pool always), zeros included.
        const pools = new Set([DEFAULT_POOL, ...agents.map((a) => a.pool)]);
        for (const pool of pools)
          for (const state of AGENT_STATES)
            this.set({ state, pool }, agents.filter((a) => a.state === state && a.pool === pool).length);
      },
    });
    if (s.gpus) registerGpuGauges(this.registry, s.gpus);
    const labelNames = ["method", "route", "status_code"] as const;
    this.requests = new Counter({
      name: "berth_http_requests_total",
      help: "HTTP requests answered",
      labelNames,
      registers,
    });
    this.durations = new Histogram({
      name: "berth_http_request_duration_seconds",
      help: "Time to answer HTTP requests",
      labelNames,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    if (s.processMetrics ?? true)
      collectDefaultMetrics({ register: this.registry, prefix: "berth_coordinator_" });
  }

  /** One answered request; `route` is the route's pattern (bounded), never the raw URL. */
  observeRequest(method: string, route: string, statusCode: number, seconds: number): void {
    const labels = { method, route, status_code: String(statusCode) };
    this.requests.inc(labels);
    this.durations.observe(labels, seconds);
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  private async typeOf(stubId: string): Promise<string> {
    const known = this.stubTypes.get(stubId);
    if (known) return known;
    const type = (await this.s.stubType?.(stubId).catch(() => undefined)) ?? "unknown";
    if (type !== "unknown") this.stubTypes.set(stubId, type);
    return type;
  }
}
