// The agent metrics package's entry point: per-container cgroup and GPU
// samples, the agent's Prometheus registry and its /metrics server.

export { type AgentMetrics, type AgentMetricsOptions, startAgentMetrics } from "./agent-metrics.ts";
export { type CgroupSample, coresBetween, readCgroupSample } from "./cgroup-usage.ts";
export { GPU_USAGE_ARGS, type GpuUsage, GpuUsageReader, type GpuUsageReaderOptions, parseGpuUsageCsv } from "./gpu-usage.ts";
export { type MetricsServer, startMetricsServer } from "./http.ts";
export { AgentMetricsRegistry, type HostCapacityFigures } from "./registry.ts";
export {
  DEFAULT_METRICS_INTERVAL_MS,
  MetricsSampler,
  type MetricsSamplerOptions,
  type SampledContainer,
} from "./sampler.ts";
