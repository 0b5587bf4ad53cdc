import type { NatsConnection } from "nats";
import type { HostCapacity } from "../../shared/fleet.ts";
import { subjects } from "../../shared/subjects.ts";
import type { ContainerApi } from "../../api/index.ts";
import { type CgroupLayout, detectCgroups } from "../runtime/index.ts";
import { cgroupsPathFor } from "../runtime/oci-spec.ts";
import { GpuUsageReader } from "./gpu-usage.ts";
import { type MetricsServer, startMetricsServer } from "./http.ts";
import { AgentMetricsRegistry } from "./registry.ts";
import { MetricsSampler, type MetricsSamplerOptions, type SampledContainer } from "./sampler.ts";

// The agent's metrics as main.ts wires them: the sampler over the container
// host, the registry, the /metrics server when a port is set, and NATS
// publishing once the agent is connected.

export interface AgentMetricsOptions {
  agentId: string;
  intervalMs: number;
  pool: string;
  /** Absent: no /metrics server. */
  port?: number;
  host: string;
  nvidiaSmi: string;
  /** Every GPU's telemetry and health, read each round; absent: only assigned GPUs' usage. */
  gpuTelemetry?: MetricsSamplerOptions["gpuTelemetry"];
  containers: Pick<ContainerApi, "listContainers">;
  /** False when the container subsystem is disabled: rounds then carry no containers. */
  containersEnabled: boolean;
  capacity: () => Promise<HostCapacity>;
  /** The cgroup path runc was given for a container id. @default the runtime's (under /berth) */
  cgroupsPathFor?: (id: string) => string;
  warn: (message: string) => void;
}

export interface AgentMetrics {
  registry: AgentMetricsRegistry;
  /** The /metrics port, when served. */
  port?: number;
  attach(nc: NatsConnection): void;
  stop(): Promise<void>;
}

export async function startAgentMetrics(o: AgentMetricsOptions): Promise<AgentMetrics> {
  const registry = new AgentMetricsRegistry({ agent: o.agentId, pool: o.pool });
  let cgroups: CgroupLayout | undefined;
  if (o.containersEnabled) {
    try {
      cgroups = detectCgroups();
    } catch (e) {
      o.warn(`container metrics are off: ${(e as Error).message}`);
    }
  }
  let nc: NatsConnection | undefined;
  const encoder = new TextEncoder();
  const sampler = new MetricsSampler({
    agentId: o.agentId,
    pool: o.pool,
    intervalMs: o.intervalMs,
    // Without a cgroup layout the list is empty, so this one is never read.
    cgroups: cgroups ?? { version: 2, unifiedMount: "/sys/fs/cgroup", controllers: new Map(), swapAccounting: false },
    containers: async () => {
      if (!cgroups) return [];
      const list = await o.containers.listContainers();
      return list
        .filter((c) => c.state === "running")
        .map(
          (c): SampledContainer => ({
            id: c.id,
            labels: c.labels,
            gpus: c.gpus,
            cpu: c.cpu,
            memoryBytes: c.memoryBytes,
            ...(c.startedAt !== undefined ? { startedAt: c.startedAt } : {}),
            cgroupsPath: (o.cgroupsPathFor ?? cgroupsPathFor)(c.id),
          }),
        );
    },
    gpus: new GpuUsageReader({ nvidiaSmiPath: o.nvidiaSmi }),
    ...(o.gpuTelemetry ? { gpuTelemetry: o.gpuTelemetry } : {}),
    capacity: async () => {
      const c = await o.capacity();
      return {
        cpuCores: c.cpuCores,
        memoryBytes: c.memoryBytes,
        gpus: c.gpus.available ? c.gpus.devices.length : 0,
      };
    },
    registry,
    publish: (round) => {
      if (nc && !nc.isClosed()) nc.publish(subjects.metrics(o.agentId), encoder.encode(JSON.stringify(round)));
    },
    warn: o.warn,
  });
  let server: MetricsServer | undefined;
  if (o.port !== undefined) server = await startMetricsServer({ host: o.host, port: o.port, registry });
  sampler.start();
  return {
    registry,
    ...(server ? { port: server.port } : {}),
    attach(conn) {
      nc = conn;
    },
    async stop() {
      await sampler.stop();
      await server?.close();
    },
  };
}
