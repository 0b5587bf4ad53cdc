// The metrics area (docs/metrics.md): the agents' rounds ingested, the pool
// sampler, the Prometheus /metrics page (with its request counters on every
// route) and the time-series routes.
import type { NatsConnection } from "nats";
import { poolOf } from "../../shared/fleet.ts";
import type { Logger } from "pino";
import type { FleetView } from "../fleet/index.ts";
import type { Area, AreaRoutes } from "../http/index.ts";
import type { StubRepo } from "../tasks/index.ts";
import { agentGpus } from "./gpu-gauges.ts";
import { MetricsIngest } from "./ingest.ts";
import { PoolSampler } from "./pool-sampler.ts";
import { CoordinatorMetrics } from "./prometheus.ts";
import { type PrometheusRouteDeps, prometheusRoutes } from "./prometheus-routes.ts";
import { type MetricsRouteDeps, metricsRoutes } from "./routes.ts";
import type { MetricsRepo } from "./store.ts";

export function metricsHttpRoutes(d: MetricsRouteDeps & { prometheus?: PrometheusRouteDeps }): AreaRoutes {
  return {
    // A hook on the root: it counts the requests of every route registered after it.
    hooks: d.prometheus ? [prometheusRoutes(d.prometheus)] : [],
    api: [metricsRoutes(d)],
  };
}

export interface MetricsDeps {
  nats: NatsConnection;
  repo: MetricsRepo;
  stubs: Pick<StubRepo, "get">;
  fleet: Pick<FleetView, "ready" | "list">;
  /** The container manager's live containers (per-type gauges). */
  containers: () => { stubId: string }[];
  /** This coordinator, among those sampling pools. */
  coordinatorId: string;
  retentionMs: number;
  /** When set, scrapes of /metrics must send it as a bearer token. */
  token?: string;
  log: Logger;
}

export function createMetrics(
  d: MetricsDeps,
): Area<{ prometheus: CoordinatorMetrics; ingest: MetricsIngest }> {
  const ingest = new MetricsIngest({ nats: d.nats, repo: d.repo, log: d.log });
  const sampler = new PoolSampler({
    repo: d.repo,
    agents: () => d.fleet.ready(),
    latest: (id) => ingest.latest(id),
    coordinatorId: d.coordinatorId,
    retentionMs: d.retentionMs,
    log: d.log,
  });
  const prometheus = new CoordinatorMetrics({
    taskCounts: () => d.repo.taskStatusCounts(),
    containers: d.containers,
    stubType: async (id) => (await d.stubs.get(id))?.type,
    agents: () => d.fleet.list().map((a) => ({ state: a.state, pool: poolOf(a.heartbeat) })),
    gpus: () => agentGpus(d.fleet.ready(), (id) => ingest.latest(id)),
  });
  return {
    service: { prometheus, ingest },
    routes: metricsHttpRoutes({
      metrics: d.repo,
      stubs: d.stubs,
      prometheus: { metrics: prometheus, ...(d.token ? { token: d.token } : {}) },
    }),
    async start() {
      ingest.start();
      try {
        sampler.start();
      } catch (e) {
        await ingest.stop();
        throw e;
      }
    },
    async stop() {
      await sampler.stop();
      await ingest.stop();
    },
  };
}
