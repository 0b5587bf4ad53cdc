// The task worker's options and its per-container and per-task state.

import type { JsMsg, NatsConnection } from "nats";
import type { TaskTrace } from "./trace.ts";

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
  /**
   * How long a task's `started` event is held back: a task that ends sooner
   * folds its start into its outcome (one event instead of two). @default 50
   */
  startedDelayMs?: number;
  /** How long released tasks wait on this agent for a runner of their stub before going back to the queue. @default 30_000 */
  readyHoldMs?: number;
  /** Reads runner containers' limits, so a failed task names a full disk or refused forks. @default none (no such reasons) */
  limits?: ContainerLimitsReader;
  /** The debug trace of each task message's life here; the worker's close writes its last lines. @default off */
  trace?: TaskTrace;
}

/** What a container's limits refused (the runtime's ContainerLimits), read when a task in it ends. */
export interface ContainerLimitState {
  /** Its disk quota; undefined: none. */
  disk?: { sizeBytes: number; freeBytes: number; full: boolean };
  /** pids.max (null: unlimited) and the forks refused at it so far (undefined: not counted). */
  pids: { limit: number | null; refused?: number };
}

export interface ContainerLimitsReader {
  limits(containerId: string): ContainerLimitState | undefined;
  /** Just the refused-forks counter: read after every result, so it must be cheap. */
  pidsRefused(containerId: string): number | undefined;
}

export interface RunnerSlotInfo {
  containerId: string;
  stubId: string;
  workspaceId: string;
  callbackUrl?: string;
  /** Tasks the runner may hold at once. */
  workers: number;
  /** Called once, at the runner's first ask for a task (its start-up is over). */
  onFirstAsk?: () => void;
  /** The stub's config_version the container was started for; undefined: unknown (takes any task). */
  configVersion?: number;
  /** Rank 0 of a gang (shared/gang.ts): its crash fails the task as the gang's, naming the rank. */
  gangRank?: number;
}

/** What `POST /v1/tasks/next` answers. */
export interface TaskAssignment {
  id: string;
  args: string;
  attempt: number;
  timeout: number;
  callback_url: string;
  created_at: number;
  /** "json": `args` is a base64 JSON object bound to the handler's parameters; absent: pickled `(args, kwargs)`. */
  payload_format?: "json";
}

/** The tasks handed to one runner worker in one answer; it runs them in order. */
export interface HandOut {
  tasks: InFlight[];
}

export interface InFlight {
  msg: JsMsg;
  taskId: string;
  attempt: number;
  maxRetries: number;
  timeoutS: number;
  callbackUrl: string;
  createdAt: number;
  /** The stub's config_version it was submitted for (TaskHeaders.configVersion); 0: unknown. */
  configVersion: number;
  /** The slot (runner container) holding it; undefined while it waits in the agent's ready queue. */
  slot: Slot | undefined;
  handOut: HandOut | undefined;
  /** ms since epoch when it was last handed to a runner. */
  handedAt: number;
  /** Set once a `started` event went out for this attempt; later events wait for it. */
  started: Promise<void> | undefined;
  /** Pending: the `started` event is held back, to be folded into the outcome if it comes first. */
  startTimer: NodeJS.Timeout | undefined;
  timeoutTimer: NodeJS.Timeout | undefined;
  workingTimer: NodeJS.Timeout;
}

export interface Slot extends RunnerSlotInfo {
  inFlight: Map<string, InFlight>;
  /** Hand-outs with tasks not yet answered: each is one busy runner worker. */
  handOuts: Set<HandOut>;
  /** Withdraws each pull in progress (a message already on its way to it is still taken: agent/tasks/pulls.ts). */
  pulls: Set<() => void>;
  closed: boolean;
  /** The container's refused-forks counter after its last answered task: a failed task that raised it hit the pids limit. */
  pidsRefused?: number;
}
