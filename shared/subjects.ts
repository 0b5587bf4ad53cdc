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
  containerEvent: (agentId: string, containerId: string) => `${AGENT_PREFIX}.${agentId}.container.${containerId}.event`,
  allContainerEvents: `${AGENT_PREFIX}.*.container.*.event`,
  /** Agent → the logs stream: one message per stdout/stderr line of a container. */
  containerLog: (agentId: string, containerId: string) => `${AGENT_PREFIX}.${agentId}.container.${containerId}.log`,
  allContainerLogs: `${AGENT_PREFIX}.*.container.*.log`,
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
  labels: Record<string, string>;
}

/** What a container log message carries (one line). */
export interface ContainerLogMessage {
  agentId: string;
  containerId: string;
  stream: "stdout" | "stderr";
  line: string;
  ts: number;
  labels: Record<string, string>;
}

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
