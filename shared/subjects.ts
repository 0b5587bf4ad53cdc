// NATS subjects berth uses. Every subject an agent may publish on starts with
// `berth.agent.`; the NATS user handed to agents is limited to these.

export const AGENT_PREFIX = "berth.agent";

export const subjects = {
  /** Agent → coordinators: capacity and liveness, every heartbeat interval. */
  heartbeat: (agentId: string) => `${AGENT_PREFIX}.${agentId}.heartbeat`,
  allHeartbeats: `${AGENT_PREFIX}.*.heartbeat`,
  /** Agent → coordinators: the agent is shutting down on purpose. */
  goodbye: (agentId: string) => `${AGENT_PREFIX}.${agentId}.goodbye`,
  allGoodbyes: `${AGENT_PREFIX}.*.goodbye`,
  /** Agent → coordinators: a container started or ended (exit code and reason). */
  containerEvent: (agentId: string, containerId: string) =>
    `${AGENT_PREFIX}.${agentId}.container.${containerId}.event`,
  allContainerEvents: `${AGENT_PREFIX}.*.container.*.event`,
  /** Superseded by containerLogs (agent/logs): not stored; kept until ContainerPublisher.log goes. */
  containerLog: (agentId: string, containerId: string) =>
    `${AGENT_PREFIX}.${agentId}.container.${containerId}.log`,
  /**
   * Agent → the logs stream (BERTH_LOGS, docs/logs.md): a batch of one
   * container's lines, all of one task or of none (`_`). Every token is a
   * logSubjectToken, so coordinators filter by workspace, stub, container
   * and task with subject filters alone.
   */
  containerLogs: (
    agentId: string,
    workspaceId: string,
    stubId: string,
    containerId: string,
    taskId: string,
  ) => `${AGENT_PREFIX}.${agentId}.logs.${workspaceId}.${stubId}.${containerId}.${taskId}`,
  allContainerLogs: `${AGENT_PREFIX}.*.logs.*.*.*.*`,
  /** One workspace's log batches, narrowed to a stub, container or task when given (already valid tokens). */
  workspaceLogs: (workspaceId: string, f: { stubId?: string; containerId?: string; taskId?: string } = {}) =>
    `${AGENT_PREFIX}.*.logs.${workspaceId}.${f.stubId ?? "*"}.${f.containerId ?? "*"}.${f.taskId ?? "*"}`,
  /** Agent → coordinators: one round of container and host usage samples (AgentMetricsMessage). */
  metrics: (agentId: string) => `${AGENT_PREFIX}.${agentId}.metrics`,
  allMetrics: `${AGENT_PREFIX}.*.metrics`,
  /** Agent → coordinators (request): the cluster's other ready agents to ask for layers (docs/images.md). */
  layerPeers: (agentId: string) => `${AGENT_PREFIX}.${agentId}.layer-peers`,
  allLayerPeers: `${AGENT_PREFIX}.*.layer-peers`,
} as const;

/** JetStream streams the coordinator creates at start. */
export const streams = {
  logs: { name: "BERTH_LOGS", subjects: [subjects.allContainerLogs] },
  containerEvents: { name: "BERTH_CONTAINER_EVENTS", subjects: [subjects.allContainerEvents] },
} as const;

/** What a container event message carries. */
export interface ContainerEventMessage {
  agentId: string;
  containerId: string;
  type: "start" | "exit";
  at: number;
  pid?: number;
  exitCode?: number;
  reason?: string;
  /** On an exit: the container's memory limit (what an oom_killed end names). */
  memoryBytes?: number;
  labels: Record<string, string>;
}

/** One line as the container host reports it (agent-internal; ContainerLogBatch is what is stored). */
export interface ContainerLogMessage {
  agentId: string;
  containerId: string;
  stream: "stdout" | "stderr";
  line: string;
  ts: number;
  labels: Record<string, string>;
}

/** One sample round of an agent (docs/metrics.md): its allocation and each running container's use. */
export interface AgentMetricsMessage {
  agentId: string;
  /** The agent's pool (agent group) for pool-timeseries. */
  pool: string;
  /** ms since epoch, by the agent's clock, when the round was read. */
  at: number;
  intervalMs: number;
  /** What the agent's running containers were given. */
  allocated: { containers: number; cpuCores: number; memoryBytes: number; gpus: number };
  containers: ContainerMetricsSample[];
  /** Every physical GPU of the host as the driver reads it this round; absent on hosts without nvidia-smi. */
  gpus?: GpuTelemetry[];
}

/** One physical GPU's figures (nvidia-smi --query-gpu); null where the driver has no value. */
export interface GpuTelemetry {
  index: number;
  uuid: string;
  model: string;
  /** As nvidia-smi prints it, e.g. "00000000:18:00.0". */
  pciBusId: string;
  utilizationPercent: number | null;
  /** Share of time the memory was read or written. */
  memoryUtilizationPercent: number | null;
  memoryUsedMiB: number | null;
  memoryTotalMiB: number | null;
  temperatureC: number | null;
  memoryTemperatureC: number | null;
  powerWatts: number | null;
  smClockMHz: number | null;
  memoryClockMHz: number | null;
  /** ECC errors since the driver loaded. */
  eccCorrectedVolatile: number | null;
  eccUncorrectedVolatile: number | null;
  /** Set when a value says the GPU must be reset. */
  problem?: string;
  /** The last XID error the kernel logged for this GPU while the agent ran. */
  lastXid?: { code: number; at: number };
  /** Set while the agent keeps new work off this GPU. */
  drained?: { reason: string; since: number };
}

export interface ContainerMetricsSample {
  containerId: string;
  /** From the container's labels (berth.workspace_id, berth.stub_id); absent for containers berth did not start for a stub. */
  workspaceId?: string;
  stubId?: string;
  /** Cores used on average over the last interval (since start for a container's first sample). */
  cpuCores: number;
  /** Working set: usage less inactive file cache. */
  memoryBytes: number;
  cpuLimitCores: number;
  memoryLimitBytes: number;
  /** Per assigned GPU; absent when nvidia-smi is absent or failed. */
  gpus?: { uuid: string; utilizationPercent: number | null; memoryUsedBytes: number | null }[];
}

/** One message of BERTH_LOGS on subjects.containerLogs: lines of one container, in order. */
export interface ContainerLogBatch {
  agentId: string;
  /** Internal ids from the container's labels; "" when it has none (not a coordinator's container). */
  workspaceId: string;
  stubId: string;
  containerId: string;
  /** The task that printed these lines, when the agent knows it. */
  taskId: string | null;
  lines: { ts: number; stream: "stdout" | "stderr"; line: string }[];
}

/** What a log subject token may be: berth's ids; anything else is written `_` (none). */
export const LOG_TOKEN = /^[A-Za-z0-9_-]{1,128}$/;
export const logSubjectToken = (id: string | null | undefined): string =>
  id && LOG_TOKEN.test(id) ? id : "_";

export interface NatsCredentials {
  url: string;
  user: string;
  password: string;
}

/** The two NATS users of a cluster, with what each may touch. */
export function clusterNatsUsers(p: { coordinatorPassword: string; agentPassword: string }) {
  return [
    { user: "coordinator", password: p.coordinatorPassword },
    {
      user: "agent",
      password: p.agentPassword,
      publish: [`${AGENT_PREFIX}.>`, "$JS.API.>", "$JS.ACK.BERTH_TASKS.>", "_INBOX.>"],
      subscribe: [`${AGENT_PREFIX}.>`, "_INBOX.>"],
    },
  ];
}
