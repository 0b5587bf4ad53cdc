// The queue side of TaskService: one JetStream message per task (its headers
// carry what a runner needs before it reads the payload), taking a message
// back, and telling agents to stop a task they already took.

import { type JetStreamManager, type MsgHdrs, type NatsConnection, headers as natsHeaders } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import {
  TASK_CANCEL_SUBJECT,
  TASKS_STREAM,
  type TaskCancelMessage,
  TaskHeaders,
  taskSubject,
} from "../../shared/tasks.ts";
import type { StubRecord } from "./stub-store.ts";
import type { LiveTask } from "./live-index.ts";
import { streamReplicas } from "../streams/index.ts";
import { ensureStubConsumer, ensureTaskStreams } from "./streams.ts";

const enc = new TextEncoder();

/** What the messages of one submission share, besides the stub's task policy. */
export interface TaskMessageFields {
  workspaceId: string;
  /** ms since epoch. */
  createdAt: number;
  expiresAt: number | null;
  callbackUrl: string | null;
  payloadFormat?: "json";
}

export class TaskQueue {
  private jsm: JetStreamManager | undefined;
  private readonly ensuredConsumers = new Set<string>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

  /** Makes the streams; from then on messages can be taken back. */
  async start(): Promise<JetStreamManager> {
    const jsm = await this.nc.jetstreamManager();
    this.jsm = jsm;
    await ensureTaskStreams(jsm, streamReplicas(this.nc));
    return jsm;
  }

  async ensureConsumer(stubId: string): Promise<void> {
    if (this.ensuredConsumers.has(stubId)) return;
    await ensureStubConsumer(this.jsm ?? (await this.nc.jetstreamManager()), stubId);
    this.ensuredConsumers.add(stubId);
  }

  /** Publishes every task's message at once; each ack (or failure) is handed on as it comes. */
  async publish(
    stub: StubRecord,
    tasks: LiveTask[],
    inputs: Uint8Array[],
    f: TaskMessageFields,
    on: { published(t: LiveTask, seq: number): void; failed(t: LiveTask, e: unknown): void },
  ): Promise<void> {
    const js = this.nc.jetstream();
    const common: [string, string][] = [
      [TaskHeaders.stubId, stub.id],
      [TaskHeaders.workspaceId, f.workspaceId],
      [TaskHeaders.maxRetries, String(stub.config.task_policy.max_retries)],
      [TaskHeaders.timeout, String(stub.config.task_policy.timeout)],
      [TaskHeaders.createdAt, String(f.createdAt)],
      // Only a container of this config (or a newer one) takes it (agent/tasks/config-versions.ts).
      [TaskHeaders.configVersion, String(stub.configVersion)],
      ...(f.expiresAt !== null ? [[TaskHeaders.expiresAt, String(f.expiresAt)] as [string, string]] : []),
      ...(f.callbackUrl ? [[TaskHeaders.callbackUrl, f.callbackUrl] as [string, string]] : []),
      ...(f.payloadFormat ? [[TaskHeaders.payloadFormat, f.payloadFormat] as [string, string]] : []),
    ];
    const subject = taskSubject(stub.id);
    await Promise.all(
      tasks.map((t, i) => {
        const h: MsgHdrs = natsHeaders();
        for (const [k, v] of common) h.set(k, v);
        h.set(TaskHeaders.taskId, t.id);
        return js.publish(subject, inputs[i], { headers: h, msgID: t.id }).then(
          (ack) => on.published(t, ack.seq),
          (e) => on.failed(t, e),
        );
      }),
    );
  }

  /** Takes a task's message back from the queue; a no-op before start() or without a message. */
  deleteMessage(seq: number | null): void {
    if (!seq || !this.jsm) return;
    this.jsm.streams.deleteMessage(TASKS_STREAM, seq, false).catch((e) => {
      // Already taken and acked, or deleted: nothing left to withdraw.
      if (!/not found|no message/i.test(describeError(e))) {
        this.log.warn({ seq, err: describeError(e) }, "could not delete a task message");
      }
    });
  }

  /** Tells the agent running the task (if any) that it ended here. */
  publishCancel(taskId: string, status: TaskCancelMessage["status"]): void {
    const msg: TaskCancelMessage = { taskId, status };
    this.nc.publish(TASK_CANCEL_SUBJECT, enc.encode(JSON.stringify(msg)));
  }
}
