// What agents report about tasks: the durable BERTH_TASK_EVENTS consumer
// (status changes, acked once written) and the core task output subjects.

import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamManager,
  type JsMsg,
  type NatsConnection,
  type Subscription,
} from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import {
  ALL_TASK_EVENTS,
  ALL_TASK_OUTPUT,
  TASK_EVENTS_STREAM,
  type TaskEvent,
  type TaskEventBatch,
  type TaskOutputMessage,
} from "../../shared/tasks.ts";
import type { TaskRepo } from "../store/tasks.ts";
import type { TaskEngine } from "./engine.ts";
import { liveFromRecord } from "./live-index.ts";
import { TASK_ACK_WAIT_MS } from "./streams.ts";
import { isTerminal } from "./transitions.ts";

/** The durable consumer of BERTH_TASK_EVENTS that coordinators share. */
export const TASK_EVENTS_CONSUMER = "berth-coordinator";
const ns = (ms: number) => ms * 1_000_000;

export class TaskEventConsumer {
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> | undefined;
  private outputSub: Subscription | undefined;
  private readonly decoder = new TextDecoder();

  constructor(
    private readonly nc: NatsConnection,
    private readonly engine: TaskEngine,
    private readonly tasks: TaskRepo,
    private readonly log: Logger,
  ) {}

  async start(jsm: JetStreamManager): Promise<void> {
    await this.ensureConsumer(jsm);
    const consumer = await this.nc.jetstream().consumers.get(TASK_EVENTS_STREAM, TASK_EVENTS_CONSUMER);
    const messages = await consumer.consume({ max_messages: 2000 });
    this.messages = messages;
    this.loop = (async () => {
      for await (const m of messages) await this.onEvent(m);
    })().catch((e) => this.log.error({ err: describeError(e) }, "task event consumer ended"));
    this.outputSub = this.nc.subscribe(ALL_TASK_OUTPUT, {
      callback: (_e, m) => this.onOutput(m.subject, m.data),
    });
  }

  async stop(): Promise<void> {
    this.outputSub?.unsubscribe();
    await this.messages?.close().catch(() => undefined);
    await this.loop;
  }

  private async onEvent(m: JsMsg): Promise<void> {
    let events: TaskEvent[];
    try {
      const body = m.json<TaskEvent | TaskEventBatch>();
      events =
        body && body.type === "batch" && Array.isArray(body.events) ? body.events : [body as TaskEvent];
      for (const ev of events) {
        if (!ev || typeof ev.taskId !== "string" || typeof ev.attempt !== "number")
          throw new Error("not a task event");
      }
    } catch (e) {
      this.log.warn({ subject: m.subject, err: describeError(e) }, "ignoring a malformed task event");
      m.ack();
      return;
    }
    // A batch is acknowledged once every event in it is committed.
    let left = events.length;
    const ackOne = () => {
      if (--left === 0) m.ack();
    };
    for (const ev of events) await this.applyOne(ev, ackOne);
  }

  private async applyOne(ev: TaskEvent, ack: () => void): Promise<void> {
    let t = this.engine.index.get(ev.taskId);
    if (!t) {
      // Not in memory: ended already (a late event), or queued by another coordinator.
      const row = await this.tasks.get(ev.taskId).catch(() => undefined);
      t = this.engine.index.get(ev.taskId);
      if (!t && row && !isTerminal(row.status)) {
        t = liveFromRecord(row);
        this.engine.index.add(t);
      }
      if (!t) {
        ack();
        return;
      }
    }
    this.engine.applyEvent(t, ev, ack);
  }

  private onOutput(subject: string, data: Uint8Array): void {
    // berth.agent.<agentId>.task.<taskId>.output: skip decoding what nobody watches.
    const taskId = subject.split(".")[4];
    if (!taskId || !this.engine.isWatched(taskId)) return;
    try {
      const o = JSON.parse(this.decoder.decode(data)) as TaskOutputMessage;
      const stream = o.stream === "stderr" ? "stderr" : "stdout";
      this.engine.emit({ type: "output", taskId, stream, data: String(o.data) });
    } catch {
      // Output is best effort.
    }
  }

  private async ensureConsumer(jsm: JetStreamManager): Promise<void> {
    try {
      await jsm.consumers.info(TASK_EVENTS_STREAM, TASK_EVENTS_CONSUMER);
    } catch {
      await jsm.consumers.add(TASK_EVENTS_STREAM, {
        durable_name: TASK_EVENTS_CONSUMER,
        filter_subject: ALL_TASK_EVENTS,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: ns(TASK_ACK_WAIT_MS),
        max_ack_pending: 20_000,
      });
    }
  }
}
