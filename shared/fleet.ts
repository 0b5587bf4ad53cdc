// What an agent reports about its host. Published on subjects.heartbeat and
// kept by coordinators as the live fleet view.

export interface GpuDevice {
  /** nvidia-smi index; for a MIG device, the parent GPU's index. */
  index: number;
  uuid: string;
  /** The driver's model name, e.g. "NVIDIA H100 80GB HBM3". */
  model: string;
  /** Normalised type used for scheduling, e.g. "H100", "A10G", "4090". */
  type: string;
  memoryMiB: number;
  /** Set for a MIG instance: its profile (e.g. "1g.10gb") and parent GPU uuid. */
  mig?: { profile: string; parentUuid: string };
}

export interface GpuReport {
  /** True when the agent offers its GPUs to workloads. */
  available: boolean;
  /** Why there are no GPUs to offer (no driver, no device nodes, ...). */
  reason?: string;
  driverVersion?: string;
  cudaVersion?: string;
  /** Whether the NVIDIA container toolkit (nvidia-ctk, for CDI) is installed. */
  toolkit: boolean;
  devices: GpuDevice[];
}

export interface HostCapacity {
  cpuCores: number;
  memoryBytes: number;
  /** Filesystem holding the agent's container data. */
  disk: { path: string; totalBytes: number; freeBytes: number };
  gpus: GpuReport;
}

export interface Heartbeat {
  agentId: string;
  hostname: string;
  version: string;
  /** ms since epoch, by the agent's clock. */
  sentAt: number;
  /** How often the agent sends these; coordinators derive "lost" from it. */
  intervalMs: number;
  /** host:port of the agent's TLS gRPC endpoint, as seen by coordinators. */
  grpcAddress: string;
  /**
   * host:port of the agent's tunnel to container ports (mutual TLS,
   * `CONNECT {containerId}:{port}`), as seen by coordinators. Absent when
   * the agent runs no tunnel (edge mode, older agents).
   */
  proxyAddress?: string;
  /**
   * The machine the agent runs on (shared/host-id.ts: a hash of /etc/machine-id, else
   * an id kept in its data dir). A coordinator with the same id is on this
   * host and reaches container ports directly instead of through the tunnel.
   * Absent from older agents.
   */
  hostId?: string;
  capacity: HostCapacity;
}

/** Counts GPUs by type, e.g. { H100: 8 }. */
export function gpuCounts(report: GpuReport): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of report.devices) out[d.type] = (out[d.type] ?? 0) + 1;
  return out;
}

/**
 * The cluster registry built images are pushed to and pulled from
 * (docs/images.md, "The cluster registry"): the coordinator's config names
 * it and hands it to every agent at join. `url` is http://host:port (plain
 * HTTP), https://host[:port] or host[:port] (HTTPS). Never logged.
 */
export interface ClusterRegistryAccess {
  url: string;
  username: string;
  password: string;
}
