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
} as const;

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
      publish: [`${AGENT_PREFIX}.>`, "$JS.API.>", "_INBOX.>"],
      subscribe: [`${AGENT_PREFIX}.>`, "_INBOX.>"],
    },
  ];
}
