// The wire of Queue, Map and Signal operations (docs/queues.md): the SDK's
// gateway route and the agent's relay for its containers carry the same
// request. The workspace is never part of it: the coordinator takes it from
// the caller's token, or from the agent for the container that asked.

import { AGENT_PREFIX } from "./subjects.ts";

export const STATE_OPS = [
  "queue.put",
  "queue.pop",
  "queue.size",
  "map.set",
  "map.get",
  "map.delete",
  "map.keys",
  "map.items",
  "map.size",
  "signal.set",
  "signal.clear",
  "signal.state",
  "signal.wait",
  // A bot transition's context.chat: one chat completion of the bot's model (docs/bots.md).
  "model.chat",
] as const;
export type StateOp = (typeof STATE_OPS)[number];

export interface StateRequest {
  op: StateOp;
  name?: string;
  /** signal.wait: the names a container listens for, and the revisions it has handled. */
  names?: string[];
  seen?: Record<string, number>;
  wait_ms?: number;
  key?: string;
  /** Pickled bytes, base64. */
  value?: string;
  ttl?: number;
  /** model.chat: the chat completion request (OpenAI's body). */
  body?: Record<string, unknown>;
  /** map.items: the key after which the next page starts. */
  after?: string;
}

/** Agent → coordinators: one container's state operation, with the workspace the agent knows it by. */
export interface RelayedStateRequest extends StateRequest {
  workspace_id: string;
}

export type RelayedStateReply =
  | ({ ok: true } & Record<string, unknown>)
  | { ok: false; error: { code: string; message: string } };

export const stateSubjects = {
  request: (agentId: string) => `${AGENT_PREFIX}.${agentId}.state`,
  allRequests: `${AGENT_PREFIX}.*.state`,
} as const;

/** Longest a bot's model.chat may take: a model scaled to zero starts first (docs/bots.md). */
export const MAX_MODEL_CALL_MS = 300_000;

/** Longest a signal.wait is held before it answers "nothing yet". */
export const MAX_SIGNAL_WAIT_MS = 25_000;
