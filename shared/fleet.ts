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
  /**
   * Set for a MIG instance: its profile (e.g. "1g.10gb"), parent GPU uuid,
   * and its GPU instance and compute instance ids (`gi`, `ci`) where the
   * driver's MIG table could be read (absent from older agents).
   */
  mig?: { profile: string; parentUuid: string; gi?: number; ci?: number };
  /**
   * The operator marked it shareable (`berth agent --shared-gpus`): it is
   * given by memory to several containers at once through NVIDIA MPS, and
   * never whole.
   */
  shared?: boolean;
}

/**
 * The name the scheduler places a device under: its type for a whole GPU
 * ("A100"), type and profile for a MIG instance ("A100:1g.10gb"). A request
 * for "A100" therefore never takes a slice, nor one for a slice a whole GPU.
 */
export function gpuSchedulingType(d: Pick<GpuDevice, "type" | "mig">): string {
  return d.mig ? `${d.type}:${d.mig.profile}` : d.type;
}

/** Whether a scheduling type (or a requested GPU type) names a MIG slice ("A100:1g.10gb"). */
export const isMigSliceType = (type: string): boolean => type.includes(":");

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
  /**
   * GPUs kept off new placements because the driver reported them unhealthy
   * (a fatal XID error, lost from the bus, needing a reset). Their devices
   * are not in `devices` while drained. Absent from older agents.
   */
  drained?: DrainedGpu[];
}

/** A physical GPU the agent drained, and why. */
export interface DrainedGpu {
  index: number;
  uuid: string;
  model: string;
  reason: string;
  /** ms since epoch, by the agent's clock. */
  since: number;
  /** The XID error that drained it, when one did. */
  xid?: number;
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
   * The address other agents reach this host at (`berth agent --node-address`):
   * the end of gangs' VXLAN tunnels (shared/gang.ts). Absent: the host of
   * grpcAddress when that is not loopback; an agent with neither takes no
   * gang of more than one host.
   */
  nodeAddress?: string;
  /**
   * The machine the agent runs on (shared/host-id.ts: a hash of /etc/machine-id, else
   * an id kept in its data dir). A coordinator with the same id is on this
   * host and reaches container ports directly instead of through the tunnel.
   * Absent from older agents.
   */
  hostId?: string;
  /** The agent's pool (`berth agent --pool`): stubs with `pool` are placed only on its agents. Absent from older agents: DEFAULT_POOL. */
  pool?: string;
  capacity: HostCapacity;
}

/** The pool of an agent started without `--pool`. */
export const DEFAULT_POOL = "default";

/** A pool's name: 1-63 characters, lower-case letters, digits, `_` and `-`, starting with a letter or digit. */
export const POOL_NAME_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;

/** The pool a heartbeat says its agent is in. */
export const poolOf = (hb: Pick<Heartbeat, "pool">): string => hb.pool || DEFAULT_POOL;

/** Counts GPUs by scheduling type, e.g. { H100: 8 }, { A100: 1, "A100:1g.5gb": 2 } or { "H200 (shared)": 1 }. */
export function gpuCounts(report: GpuReport): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of report.devices) {
    const t = d.shared ? `${gpuSchedulingType(d)} (shared)` : gpuSchedulingType(d);
    out[t] = (out[t] ?? 0) + 1;
  }
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
  /**
   * A private CA its TLS certificate chains to, PEM (berth up --advertise: the cluster CA).
   * The coordinator's own; agents are handed url and credentials and trust the cluster CA.
   */
  caPem?: string;
}
