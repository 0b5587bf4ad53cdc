// The coordinator metrics package's entry point: ingest of agents' rounds,
// the pool sampler, the time-series answers and the Prometheus registry.

export {
  type LatestRound,
  METRICS_QUEUE_GROUP,
  MetricsIngest,
  type MetricsIngestOptions,
  parseMetricsRound,
  sampleRows,
} from "./ingest.ts";
export {
  DEFAULT_METRICS_RETENTION_MS,
  DEFAULT_POOL,
  DEFAULT_POOL_INTERVAL_MS,
  PoolSampler,
  type PoolSamplerOptions,
  poolFigures,
} from "./pool-sampler.ts";
export { CoordinatorMetrics, type CoordinatorMetricsSources } from "./prometheus.ts";
export { type AgentGpus, agentGpus, registerGpuGauges } from "./gpu-gauges.ts";
export {
  MAX_BUCKETS,
  type Point,
  parseRange,
  poolTimeseries,
  type RangeQuery,
  response,
  type Series,
  stubTimeseries,
  type TimeseriesResponse,
  workspaceTimeseries,
} from "./timeseries.ts";
export { prometheusRoutes } from "./prometheus-routes.ts";
export type { PrometheusRouteDeps } from "./prometheus-routes.ts";
export { metricsRoutes } from "./routes.ts";
export { MetricsRepo } from "./store.ts";
export { createMetrics, metricsHttpRoutes } from "./area.ts";
export type { MetricsDeps } from "./area.ts";
