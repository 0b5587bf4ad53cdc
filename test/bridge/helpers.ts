// What the bridge tests share: a real nats-server with the task streams,
// a coordinator-side connection to publish tasks and read events, an agent
// connection with the agent's NATS user, and an HTTP client over a unix socket.

import { request } from "node:http";
import { join } from "node:path";
import { connect, headers, type JetStreamManager, type NatsConnection } from "nats";
import type { RunnerConfig } from "../../api/index.ts";
import type { TaskRunners } from "../../agent/tasks/runners.ts";
import type { TaskAssignment } from "../../agent/tasks/types.ts";
import { ensureStubConsumer, ensureTaskStreams } from "../../coordinator/tasks/streams.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { clusterNatsUsers } from "../../shared/subjects.ts";
import { waitFor } from "../../shared/net.ts";
import {
  TASK_EVENTS_STREAM,
  type TaskEvent,
  type TaskEventBatch,
  TaskHeaders,
  TASKS_STREAM,
  taskSubject,
} from "../../shared/tasks.ts";
import { startTestNats, type TestNats } from "../helpers/nats.ts";

export interface TaskNats {
  nats: TestNats;
  /** The coordinator's side: publishes tasks and cancels, reads events. */
  coord: NatsConnection;
  jsm: JetStreamManager;
  /** The agent's side, with the agent's NATS user. */
  agent: NatsConnection;
}

export async function startTaskNats(t: { after: (fn: () => unknown) => void }): Promise<TaskNats> {
  const nats = await startTestNats(t);
  const coord = await connect({
    servers: nats.url,
    user: nats.coordinator.user,
    pass: nats.coordinator.password,
  });
  t.after(() => closeNats(coord));
  assertAgentMayAck();
  const agent = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
  t.after(() => closeNats(agent));
  const jsm = await coord.jetstreamManager();
  await ensureTaskStreams(jsm);
  return { nats, coord, jsm, agent };
}

/** NATS subject matching: `*` one token, `>` the rest. */
function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return i < s.length;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}

/**
 * The agent acks, naks, terms and extends task messages: publishes on
 * `$JS.ACK.BERTH_TASKS...`. Without that permission its connection is cut on
 * the first ack; say so plainly instead of timing out on a full queue.
 */
function assertAgentMayAck(): void {
  const agentUser = clusterNatsUsers({ coordinatorPassword: "x", agentPassword: "x" }).find(
    (u) => u.user === "agent",
  );
  const subject = `$JS.ACK.${TASKS_STREAM}.stub.1.1.1.1.0`;
  const allowed = (agentUser?.publish ?? []).some((p) => subjectMatches(p, subject));
  if (!allowed) {
    throw new Error(
      "the agent's NATS user may not ack task messages: clusterNatsUsers in shared/subjects.ts must let it publish to $JS.ACK.BERTH_TASKS.>",
    );
  }
}

export interface TaskOptions {
  stubId: string;
  taskId: string;
  payload?: Buffer;
  maxRetries?: number;
  timeoutS?: number;
  expiresAt?: number;
  callbackUrl?: string;
  /** TaskHeaders.payloadFormat: "json" for a JSON object payload. */
  payloadFormat?: "json";
  /** TaskHeaders.configVersion: the stub's config_version the task was submitted for. */
  configVersion?: number;
}

/** Publishes a task message the way the coordinator does. */
export async function publishTask(n: TaskNats, o: TaskOptions): Promise<void> {
  await ensureStubConsumer(n.jsm, o.stubId);
  const h = headers();
  h.set(TaskHeaders.taskId, o.taskId);
  h.set(TaskHeaders.stubId, o.stubId);
  h.set(TaskHeaders.workspaceId, "ws-test");
  h.set(TaskHeaders.maxRetries, String(o.maxRetries ?? 0));
  h.set(TaskHeaders.timeout, String(o.timeoutS ?? -1));
  h.set(TaskHeaders.createdAt, String(Date.now()));
  if (o.expiresAt !== undefined) h.set(TaskHeaders.expiresAt, String(o.expiresAt));
  if (o.callbackUrl) h.set(TaskHeaders.callbackUrl, o.callbackUrl);
  if (o.payloadFormat) h.set(TaskHeaders.payloadFormat, o.payloadFormat);
  if (o.configVersion !== undefined) h.set(TaskHeaders.configVersion, String(o.configVersion));
  await n.coord.jetstream().publish(taskSubject(o.stubId), o.payload ?? Buffer.from(`args of ${o.taskId}`), {
    headers: h,
  });
}

/** The events of `taskId` stored on BERTH_TASK_EVENTS, in stream order, batches unpacked, as sent. */
export async function rawEvents(n: TaskNats, taskId: string): Promise<TaskEvent[]> {
  const info = await n.jsm.streams.info(TASK_EVENTS_STREAM);
  const out: TaskEvent[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const m = await n.jsm.streams.getMessage(TASK_EVENTS_STREAM, { seq }).catch(() => undefined);
    if (!m) continue;
    const body = JSON.parse(new TextDecoder().decode(m.data)) as TaskEvent | TaskEventBatch;
    for (const e of body.type === "batch" ? body.events : [body]) if (e.taskId === taskId) out.push(e);
  }
  return out;
}

/**
 * Like rawEvents, with each start that was folded into an outcome (its
 * `startedAt`) shown as the `started` event it stands for, so a test reads
 * the same sequence whether or not the agent held the start back.
 */
export async function storedEvents(n: TaskNats, taskId: string): Promise<TaskEvent[]> {
  const out: TaskEvent[] = [];
  for (const e of await rawEvents(n, taskId)) {
    if (e.type !== "started" && e.startedAt !== undefined) {
      const { startedAt, ...rest } = e;
      out.push({ ...rest, type: "started", at: startedAt } as TaskEvent);
    }
    out.push(e);
  }
  return out;
}

/** Waits until `taskId` has `count` stored events; returns them. */
export function eventsOf(
  n: TaskNats,
  taskId: string,
  count: number,
  timeoutMs = 15_000,
): Promise<TaskEvent[]> {
  return waitFor(
    async () => {
      const evs = await storedEvents(n, taskId);
      return evs.length >= count ? evs : undefined;
    },
    { timeoutMs, intervalMs: 50, what: `${count} events of ${taskId}` },
  );
}

/** Waits until BERTH_TASKS holds no message (every task acked or terminated). */
export function queueEmpty(n: TaskNats, timeoutMs = 10_000): Promise<true> {
  return waitFor(
    async () => ((await n.jsm.streams.info(TASKS_STREAM)).state.messages === 0 ? true : undefined),
    { timeoutMs, intervalMs: 50, what: "an empty task queue" },
  );
}

export interface BridgeReply {
  status: number;
  body: unknown;
}

/** One POST over the unix socket; JSON in, JSON (or nothing) out. */
export function post(
  socketPath: string,
  path: string,
  body: unknown = {},
  raw?: string,
): Promise<BridgeReply> {
  return new Promise((resolve, reject) => {
    const text = raw ?? JSON.stringify(body);
    const req = request(
      {
        socketPath,
        path,
        method: "POST",
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(text) },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on("data", (c: Buffer) => parts.push(c));
        res.on("end", () => {
          const s = Buffer.concat(parts).toString();
          resolve({ status: res.statusCode ?? 0, body: s ? JSON.parse(s) : undefined });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(text);
  });
}

/** `POST /v1/tasks/next`, expecting a task. */
export async function nextTask(socketPath: string): Promise<TaskAssignment> {
  const r = await post(socketPath, "/v1/tasks/next");
  if (r.status !== 200) throw new Error(`next answered ${r.status} ${JSON.stringify(r.body)}`);
  return (r.body as { task: TaskAssignment }).task;
}

/** A runner slot the bridge opened: its container id and its bridge socket. */
export interface OpenedRunner {
  containerId: string;
  socket: string;
}

/**
 * Opens function runner slots of a stub on `runners`, each as container
 * `${prefix}${n}` (n counting from 1) with its bridge socket in `dir`;
 * `extra` adds to or overrides the runner's config; `beforeOpen` sees the
 * container id before the slot opens (to set what the container reports);
 * `gangRank` opens it as that rank of a gang.
 */
export function runnerOpener(
  runners: TaskRunners,
  dir: string,
  prefix: string,
): (
  stubId: string,
  extra?: Partial<RunnerConfig>,
  beforeOpen?: (containerId: string) => void,
  gangRank?: number,
) => Promise<OpenedRunner> {
  let seq = 0;
  return async (stubId, extra = {}, beforeOpen, gangRank) => {
    const containerId = `${prefix}${++seq}`;
    beforeOpen?.(containerId);
    const socket = join(dir, `${containerId}.sock`);
    await runners.open(
      containerId,
      { stubId, workspaceId: "ws-test", stubType: "function", handler: "app:f", ...extra },
      socket,
      undefined,
      gangRank,
    );
    return { containerId, socket };
  };
}
