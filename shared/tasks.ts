// The task protocol between coordinator, agents and runners: JetStream
// subjects and headers, task events, and the stub config. docs/tasks.md
// describes the flow and the status transitions.

import type { BotDefinition } from "./bots.ts";
import { AGENT_PREFIX } from "./subjects.ts";

export const TASK_STATUSES = [
  "PENDING",
  "RUNNING",
  "COMPLETE",
  "RETRY",
  "CANCELLED",
  "TIMEOUT",
  "EXPIRED",
  "FAILED",
] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<TaskStatus> = new Set([
  "COMPLETE",
  "CANCELLED",
  "TIMEOUT",
  "EXPIRED",
  "FAILED",
]);

export const STUB_TYPES = [
  "function",
  "endpoint",
  "asgi",
  "realtime",
  "taskqueue",
  "schedule",
  "pod",
  "sandbox",
  "bot",
] as const;

/** The decoded `stub.config` of the spec, field for field. */
export interface StubConfig {
  runtime: { cpu: number; gpu: string; memory: number; image_id: string };
  handler: string;
  on_start: string;
  python_version: string;
  keep_warm_seconds: number;
  max_pending_tasks: number;
  callback_url: string;
  task_policy: { max_retries: number; timeout: number; expires: string };
  workers: number;
  authorized: boolean;
  volumes: unknown[] | null;
  autoscaler: { type: string; max_containers: number; tasks_per_container: number };
}

/**
 * What berth keeps beside the spec's config for a stub (not part of
 * `stub.config`): details the spec's flat fields cannot carry.
 */
export interface StubExtra {
  /** `runtime.cpu` is an integer in the spec; this is the exact core count (millicores / 1000). */
  cpu_millicores: number;
  /** GPU types in priority order (`runtime.gpu` holds them comma-joined). */
  gpu_types: string[];
  gpu_count: number;
  /**
   * Part of one shared GPU instead of whole GPUs: this many MiB of its
   * memory (`gpu_memory=`, docs/gpus.md "Shared GPUs"). Absent: whole GPUs.
   */
  gpu_memory_mib?: number;
  /** Exception class names (`Name` or `module.Name`) that retry like a crash. */
  retry_for: string[];
  /** Full image reference the agents pull; empty = the cluster's default image. */
  image_ref: string;
  /** sha256 hex of the code archive; empty when none. */
  code_sha256: string;
  secrets: string[];
  headless: boolean;
  /** Deployments (docs/deployments.md): the autoscaler's baseline, kept while the deployment is active. */
  min_containers?: number;
  /** Requests one container handles at once (endpoint, asgi, realtime). @default 1 */
  concurrent_requests?: number;
  /** A schedule's cron expression (coordinator/schedules/cron.ts). */
  when?: string;
  /** How the handler takes a JSON body (sdk/python/berth/handler_call.py describe_params). */
  handler_params?: HandlerParams;
  /** Pods and sandboxes (docs/sandboxes.md): the command the container runs instead of the runner. */
  entrypoint?: string[];
  /** Pods and sandboxes: container ports exposed at start, each with a public URL. */
  ports?: number[];
  /** Pods and sandboxes: outbound policy (shared/egress.ts rules). */
  block_network?: boolean;
  allow_list?: string[];
  /** Pods and sandboxes: environment variables of the container. */
  env?: Record<string, string>;
  /** Sandboxes: idle seconds before the sandbox is terminated; -1 never. */
  ttl_seconds?: number;
  /**
   * "gvisor": the containers run under gVisor (runsc) instead of the agent's
   * OCI runtime (docs/runtime.md, "OCI runtimes"). @default "container"
   */
  isolation?: "container" | "gvisor";
  /**
   * Only agents of this pool (`berth agent --pool`, docs/pools.md) run its
   * containers; a pool no agent is in is refused as unplaceable. @default any agent
   */
  pool?: string;
  /**
   * Higher is placed first; a container that cannot be placed may preempt
   * running `preemptible` work of a lower priority (docs/gpus.md,
   * "Priorities and preemption"). @default 0
   */
  priority?: number;
  /** Its running containers may be preempted for higher-priority work; their tasks are requeued. @default false */
  preemptible?: boolean;
  /**
   * Functions and pods: each container is a gang of this many, one per host,
   * placed all or nothing (shared/gang.ts, docs/gpus.md "Gang jobs across
   * hosts"). @default 1
   */
  nodes?: number;
  /** Endpoint and asgi deployments: the model names the /v1 gateway routes to them (docs/inference.md). */
  served_models?: string[];
  /** Bot deployments: locations, transitions and model (docs/bots.md). */
  bot?: BotDefinition;
}

/** A handler's signature as JSON bodies are checked against it (docs/deployments-sdk.md). */
export interface HandlerParams {
  names: string[];
  required: string[];
  var_keyword: boolean;
  context: boolean;
}

/** Stub types whose containers serve HTTP themselves (the coordinator proxies to them). */
export const HTTP_SERVED_TYPES: ReadonlySet<string> = new Set(["endpoint", "asgi", "realtime"]);
/** "endpoint/deployment" → "endpoint". */
export const baseStubType = (type: string): string => type.split("/")[0] ?? type;

/** The work-queue stream holding every pending task; one subject per stub. */
export const TASKS_STREAM = "BERTH_TASKS";
export const taskSubject = (stubId: string) => `berth.tasks.${stubId}`;
export const ALL_TASK_SUBJECTS = "berth.tasks.*";
/** The durable pull consumer the runners of one stub share. */
export const stubConsumerName = (stubId: string) => stubId;

/** Headers of a task message; the payload is the pickled `(args, kwargs)` as sent by the SDK. */
export const TaskHeaders = {
  taskId: "Berth-Task-Id",
  stubId: "Berth-Stub-Id",
  workspaceId: "Berth-Workspace-Id",
  /** Retries after the first attempt (task_policy.max_retries). */
  maxRetries: "Berth-Max-Retries",
  /** Seconds; -1 = no timeout. */
  timeout: "Berth-Timeout",
  /** ms since epoch after which a task not yet started is EXPIRED; absent = never. */
  expiresAt: "Berth-Expires-At",
  /** ms since epoch. */
  createdAt: "Berth-Created-At",
  /** Per-task callback URL overriding the stub's; absent = the stub's. */
  callbackUrl: "Berth-Callback-Url",
  /**
   * "json": the payload is a JSON object bound to the handler's parameters
   * (sdk/python/berth/handler_call.py), as a task queue POST or a schedule
   * tick sends it; absent: the pickled `(args, kwargs)`.
   */
  payloadFormat: "Berth-Payload-Format",
  /**
   * The stub's config_version the task was submitted for: a runner container
   * takes only tasks of its own config or an older one (agent/tasks/config-versions.ts).
   */
  configVersion: "Berth-Config-Version",
} as const;

/** Stream of task events (agent → coordinator), durable so none is lost while a coordinator restarts. */
export const TASK_EVENTS_STREAM = "BERTH_TASK_EVENTS";
export const taskEventSubject = (agentId: string, taskId: string) =>
  `${AGENT_PREFIX}.${agentId}.task.${taskId}.event`;
export const ALL_TASK_EVENTS = `${AGENT_PREFIX}.*.task.*.event`;
/**
 * Several events of one agent in one stored message (TaskEventBatch); the
 * `_batch` token matches ALL_TASK_EVENTS and is never a task id.
 */
export const taskEventBatchSubject = (agentId: string) => `${AGENT_PREFIX}.${agentId}.task._batch.event`;
/** Core NATS (not stored): what a running task prints, for the caller's terminal. */
export const taskOutputSubject = (agentId: string, taskId: string) =>
  `${AGENT_PREFIX}.${agentId}.task.${taskId}.output`;
export const ALL_TASK_OUTPUT = `${AGENT_PREFIX}.*.task.*.output`;
/** Core NATS, coordinator → every agent: stop a task wherever it runs. Payload: TaskCancelMessage. */
export const TASK_CANCEL_SUBJECT = `${AGENT_PREFIX}.all.task-cancel`;

export interface TaskCancelMessage {
  taskId: string;
  /** CANCELLED, or EXPIRED when the sweeper expired a task an agent may hold. */
  status: "CANCELLED" | "EXPIRED";
}

/** An error as the runner reports it; `pickled` re-raises the same exception type in the caller. */
export interface TaskError {
  type: string;
  message: string;
  traceback: string;
  /** base64 pickle of the exception object, when it pickles. */
  pickled?: string;
}

interface TaskEventBase {
  taskId: string;
  stubId: string;
  workspaceId: string;
  agentId: string;
  containerId: string;
  /** 1 for the first attempt (JetStream delivery count). */
  attempt: number;
  /** ms since epoch. */
  at: number;
}

/** A runner took the task: status RUNNING (after PENDING or RETRY). */
export interface TaskStartedEvent extends TaskEventBase {
  type: "started";
}

/**
 * A task that ends (or is retried) soon after it starts gets no `started`
 * event of its own: its outcome carries when it started, and the coordinator
 * records RUNNING at that time before the outcome.
 */
interface FoldedStart {
  /** ms since epoch; set when no `started` event was sent for this attempt. */
  startedAt?: number;
}

/** An attempt failed and the task goes back to the queue: status RETRY. */
export interface TaskRetryEvent extends TaskEventBase, FoldedStart {
  type: "retry";
  /** container_exited, retry_for, timeout_heartbeat, ... */
  reason: string;
  error?: TaskError;
}

/** The task ended. */
export interface TaskFinishedEvent extends TaskEventBase, FoldedStart {
  type: "finished";
  status: "COMPLETE" | "FAILED" | "TIMEOUT" | "EXPIRED" | "CANCELLED";
  /** base64 pickle of the return value (COMPLETE). */
  result?: string;
  /** The return value as JSON text, when it is JSON-serialisable (for callbacks and the REST API). */
  resultJson?: string;
  error?: TaskError;
  reason?: string;
}

export type TaskEvent = TaskStartedEvent | TaskRetryEvent | TaskFinishedEvent;

/** What a message on taskEventBatchSubject holds: events in the order they happened. */
export interface TaskEventBatch {
  type: "batch";
  events: TaskEvent[];
}

export interface TaskOutputMessage {
  taskId: string;
  /** The runner container that printed it (the log shipper narrows its matching to it). */
  containerId?: string;
  stream: "stdout" | "stderr";
  data: string;
  at: number;
}

/** Largest pickled argument tuple (per task) and pickled result berth accepts. */
export const MAX_TASK_ARGS_BYTES = 4 * 1024 * 1024;
export const MAX_TASK_RESULT_BYTES = 4 * 1024 * 1024;

/** Container labels the coordinator sets on the containers it starts for a stub. */
export const RunnerLabels = {
  stubId: "berth.stub_id",
  workspaceId: "berth.workspace_id",
  managed: "berth.managed",
} as const;

/** Where things appear inside a runner container. */
export const RunnerPaths = {
  code: "/mnt/code",
  sdk: "/berth/sdk",
  bridgeDir: "/berth/run",
  socket: "/berth/run/agent.sock",
} as const;
