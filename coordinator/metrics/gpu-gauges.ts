import { Gauge, type Registry } from "prom-client";
import type { Heartbeat } from "../../shared/fleet.ts";
import type { AgentMetricsMessage, GpuTelemetry } from "../../shared/subjects.ts";

// Every agent's GPUs on the coordinator's /metrics, under the names NVIDIA's
// DCGM exporter uses, so dashboards built for it (Grafana's "NVIDIA DCGM
// Exporter" board) read berth's figures unchanged. The labels are the
// exporter's (gpu, UUID, device, modelName, Hostname, pci_bus_id) plus the
// berth agent id. Host-level only: no workspace appears.

/** The GPUs of one agent as its latest metrics round gave them. */
export interface AgentGpus {
  agentId: string;
  hostname: string;
  gpus: GpuTelemetry[];
}

const LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id", "agent"] as const;
type Labels = Record<(typeof LABELS)[number], string>;

/** name, help, and the figure read from a row (null: the series is left out). */
const FIELDS: [string, string, (g: GpuTelemetry) => number | null][] = [
  ["DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)", (g) => g.utilizationPercent],
  ["DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)", (g) => g.memoryUtilizationPercent],
  ["DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)", (g) => g.memoryUsedMiB],
  [
    "DCGM_FI_DEV_FB_FREE",
    "Framebuffer memory free (in MiB)",
    (g) =>
      g.memoryTotalMiB !== null && g.memoryUsedMiB !== null ? g.memoryTotalMiB - g.memoryUsedMiB : null,
  ],
  ["DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)", (g) => g.temperatureC],
  ["DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C)", (g) => g.memoryTemperatureC],
  ["DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)", (g) => g.powerWatts],
  ["DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)", (g) => g.smClockMHz],
  ["DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)", (g) => g.memoryClockMHz],
  [
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "Single-bit (corrected) volatile ECC errors",
    (g) => g.eccCorrectedVolatile,
  ],
  [
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "Double-bit (uncorrected) volatile ECC errors",
    (g) => g.eccUncorrectedVolatile,
  ],
  [
    "DCGM_FI_DEV_XID_ERRORS",
    "Value of the last XID error encountered (0: none)",
    (g) => g.lastXid?.code ?? 0,
  ],
  [
    "berth_gpu_drained",
    "1 while berth keeps new work off the GPU (see berth agent list for why)",
    (g) => (g.drained ? 1 : 0),
  ],
];

/** Registers the GPU gauges; each scrape rebuilds them from `source`. */
export function registerGpuGauges(registry: Registry, source: () => AgentGpus[]): void {
  // Each gauge reads the agents itself: the source is the in-memory latest rounds, cheap to walk.
  const rows = () =>
    source().flatMap((a) =>
      a.gpus.map((gpu) => ({
        gpu,
        labels: {
          gpu: String(gpu.index),
          UUID: gpu.uuid,
          device: `nvidia${gpu.index}`,
          modelName: gpu.model,
          Hostname: a.hostname,
          pci_bus_id: gpu.pciBusId,
          agent: a.agentId,
        } satisfies Labels,
      })),
    );
  for (const [name, help, read] of FIELDS) {
    new Gauge({
      name,
      help,
      labelNames: LABELS,
      registers: [registry],
      collect() {
        this.reset();
        for (const r of rows()) {
          const v = read(r.gpu);
          if (v !== null) this.set(r.labels, v);
        }
      },
    });
  }
}

/** The ready agents' GPUs, each from the agent's latest round (none yet: left out). */
export function agentGpus(
  ready: readonly { agentId: string; heartbeat: Pick<Heartbeat, "hostname"> }[],
  latest: (agentId: string) => { round: Pick<AgentMetricsMessage, "gpus"> } | undefined,
): AgentGpus[] {
  return ready.flatMap((a) => {
    const gpus = latest(a.agentId)?.round.gpus;
    return gpus && gpus.length > 0 ? [{ agentId: a.agentId, hostname: a.heartbeat.hostname, gpus }] : [];
  });
}
