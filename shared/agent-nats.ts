// What one agent's own NATS identity may touch (docs/install.md, "Agent
// credentials"). Everything an agent publishes is under berth.agent.<its id>.;
// the rest is the JetStream API it needs to pull and ack tasks.

import { AGENT_PREFIX } from "./subjects.ts";
import { TASK_CANCEL_SUBJECT, TASKS_STREAM } from "./tasks.ts";

/** The agent's reply inboxes: its own prefix, so no agent can read another's replies. */
export const agentInboxPrefix = (agentId: string) => `_INBOX_${agentId}`;

/** Public nkey of a user: "U" and 55 base32 characters. */
export const USER_NKEY_RE = /^U[A-Z2-7]{55}$/;

export function agentNatsPermissions(agentId: string): { publish: string[]; subscribe: string[] } {
  return {
    publish: [
      // heartbeat, goodbye, metrics, container events, log batches, task
      // events (JetStream publishes), state and output requests.
      `${AGENT_PREFIX}.${agentId}.>`,
      // Pulling tasks: the stub's durable consumer's info and its next messages.
      `$JS.API.CONSUMER.INFO.${TASKS_STREAM}.*`,
      `$JS.API.CONSUMER.MSG.NEXT.${TASKS_STREAM}.*`,
      // ack, nak, in-progress and term of task messages.
      `$JS.ACK.${TASKS_STREAM}.>`,
    ],
    subscribe: [
      // Its own tasks' output (relayed to callers) and any request to it.
      `${AGENT_PREFIX}.${agentId}.>`,
      TASK_CANCEL_SUBJECT,
      `${agentInboxPrefix(agentId)}.>`,
    ],
  };
}

/** What a joined agent connects to NATS with: its own nkey, or (joined before per-agent identities) the shared user. */
export interface AgentNatsCredentials {
  url: string;
  /** The shared agent user (legacy). */
  user?: string;
  password?: string;
  /** The agent's own nkey seed (S...), made on the host at join; the coordinator only sees its public key. */
  seed?: string;
}
