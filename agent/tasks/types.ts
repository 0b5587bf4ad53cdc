// The task worker's options and its per-container and per-task state.

import type { JsMsg, NatsConnection } from "nats";

export interface TaskWorkerLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface TaskWorkerOptions {
  nc: NatsConnection;
  agentId: string;
  /** Stops and removes a container (a timed-out or cancelled task's). */
  kill: (containerId: string) => Promise<void>;
  logger?: TaskWorkerLogger;
  /** How long one `next` waits for a message. @default 25_000 */
  pullWaitMs?: number;
  /** How often an in-flight message is marked in progress. @default 10_000 */
  workingIntervalMs?: number;
  /** How long a cancelled task id is remembered. @default 600_000 */
  cancelMemoryMs?: number;
}

export interface RunnerSlotInfo {
  containerId: string;
  stubId: string;
  workspaceId: string;
  callbackUrl?: string;
  /** Tasks the runner may hold at once. */
  workers: number;
}

/** What `POST /v1/tasks/next` answers. */
export interface TaskAssignment {
  id: string;
  args: string;
  attempt: number;
  timeout: number;
  callback_url: string;
  created_at: number;
}

export interface InFlight {
  msg: JsMsg;
  taskId: string;
  attempt: number;
  maxRetries: number;
  slot: Slot;
  started: Promise<void>;
  timers: NodeJS.Timeout[];
}

export interface Slot extends RunnerSlotInfo {
  inFlight: Map<string, InFlight>;
  /** Stops each pull in progress (unsubscribing drops the server's pending request). */
  pulls: Set<() => void>;
  closed: boolean;
}
