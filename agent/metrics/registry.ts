import { collectDefaultMetrics, Gauge, Registry } from "prom-client";
import type { AgentMetricsMessage } from "../../shared/subjects.ts";

// The agent's Prometheus registry: one per agent (never prom-client's global
// one, so two agents in one process, as in tests, keep their own figures).
// Container gauges are rebuilt from each sample round, so an exited
// container's series disappear with it.

export interface HostCapacityFigures {
  cpuCores: number;
  memoryBytes: number;
  gpus: number;
}

const CONTAINER_LABELS = ["container", "stub", "workspace"] as const;

export class AgentMetricsRegistry {
  readonly registry = new Registry();
  private readonly cpu: Gauge<(typeof CONTAINER_LABELS)[number]>;
  private readonly memory: Gauge<(typeof CONTAINER_LABELS)[number]>;
  private readonly cpuLimit: Gauge<(typeof CONTAINER_LABELS)[number]>;
  private readonly memoryLimit: Gauge<(typeof CONTAINER_LABELS)[number]>;
  private readonly gpuUtil: Gauge<(typeof CONTAINER_LABELS)[number] | "gpu">;
  private readonly gpuMemory: Gauge<(typeof CONTAINER_LABELS)[number] | "gpu">;
  private readonly capacity: Gauge<"resource">;
  private readonly allocated: Gauge<"resource">;
  private readonly containers: Gauge;

  constructor(defaultLabels: { agent: string; pool: string }, processMetrics = true) {
    this.registry.setDefaultLabels(defaultLabels);
    const r = [this.registry];
    const labelNames = CONTAINER_LABELS;
    this.cpu = new Gauge({ name: "berth_container_cpu_cores", help: "Cores a container used over the last sample interval", labelNames, registers: r });
    this.memory = new Gauge({ name: "berth_container_memory_bytes", help: "A container's working set (usage less inactive file cache)", labelNames, registers: r });
    this.cpuLimit = new Gauge({ name: "berth_container_cpu_limit_cores", help: "Cores a container was given", labelNames, registers: r });
    this.memoryLimit = new Gauge({ name: "berth_container_memory_limit_bytes", help: "Memory a container was given", labelNames, registers: r });
    const gpuLabels = [...CONTAINER_LABELS, "gpu"] as const;
    this.gpuUtil = new Gauge({ name: "berth_container_gpu_utilization_percent", help: "Utilisation of a GPU assigned to a container", labelNames: gpuLabels, registers: r });
    this.gpuMemory = new Gauge({ name: "berth_container_gpu_memory_used_bytes", help: "Memory in use on a GPU assigned to a container", labelNames: gpuLabels, registers: r });
    this.capacity = new Gauge({ name: "berth_agent_capacity", help: "What the host offers: resource is cpu_cores, memory_bytes or gpus", labelNames: ["resource"], registers: r });
    this.allocated = new Gauge({ name: "berth_agent_allocated", help: "What the running containers were given: resource is cpu_cores, memory_bytes or gpus", labelNames: ["resource"], registers: r });
    this.containers = new Gauge({ name: "berth_agent_containers", help: "Running containers", registers: r });
    if (processMetrics) collectDefaultMetrics({ register: this.registry, prefix: "berth_agent_" });
  }

  /** Replaces the container and allocation gauges with one sample round. */
  record(round: AgentMetricsMessage, capacity?: HostCapacityFigures): void {
    for (const g of [this.cpu, this.memory, this.cpuLimit, this.memoryLimit, this.gpuUtil, this.gpuMemory]) g.reset();
    for (const c of round.containers) {
      const labels = { container: c.containerId, stub: c.stubId ?? "", workspace: c.workspaceId ?? "" };
      this.cpu.set(labels, c.cpuCores);
      this.memory.set(labels, c.memoryBytes);
      this.cpuLimit.set(labels, c.cpuLimitCores);
      this.memoryLimit.set(labels, c.memoryLimitBytes);
      for (const g of c.gpus ?? []) {
        if (g.utilizationPercent !== null) this.gpuUtil.set({ ...labels, gpu: g.uuid }, g.utilizationPercent);
        if (g.memoryUsedBytes !== null) this.gpuMemory.set({ ...labels, gpu: g.uuid }, g.memoryUsedBytes);
      }
    }
    const a = round.allocated;
    this.allocated.set({ resource: "cpu_cores" }, a.cpuCores);
    this.allocated.set({ resource: "memory_bytes" }, a.memoryBytes);
    this.allocated.set({ resource: "gpus" }, a.gpus);
    this.containers.set(a.containers);
    if (capacity) {
      this.capacity.set({ resource: "cpu_cores" }, capacity.cpuCores);
      this.capacity.set({ resource: "memory_bytes" }, capacity.memoryBytes);
      this.capacity.set({ resource: "gpus" }, capacity.gpus);
    }
  }

  /** The exposition text and its content type. */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
