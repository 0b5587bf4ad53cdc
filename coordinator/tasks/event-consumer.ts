// What agents report about tasks: the durable BERTH_TASK_EVENTS consumer
// (status changes, acked once written) and the core task output subjects.
//
// Several coordinators share the durable consumer, so each event reaches one
// of them, which writes it. That one then relays the event on a core subject
// (TASK_EVENTS_APPLIED_SUBJECT) once it is committed, and every other
// coordinator applies it to its own live copy of the task (TaskEngine.observe):
// a task's status, its event streams and waits are right on any coordinator,
// whichever one the agent's event reached.

import {
  headers,
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
import { randomUUID } from "node:crypto";
import {
  ALL_TASK_EVENTS,
  ALL_TASK_OUTPUT,
  TASK_EVENTS_STREAM,
  type TaskEvent,
  type TaskEventBatch,
  type TaskOutputMessage,
} from "../../shared/tasks.ts";
import type { TaskRepo } from "./store.ts";
import type { TaskEngine } from "./engine.ts";
import { type LiveTask, liveFromRecord } from "./live-index.ts";
import { TASK_ACK_WAIT_MS } from "./streams.ts";
import { isTerminal } from "./transitions.ts";

/** The durable consumer of BERTH_TASK_EVENTS that coordinators share. */
export const TASK_EVENTS_CONSUMER = "berth-coordinator";
/** Core NATS, coordinator → coordinators: a task event (or batch) that coordinator committed. Agents may not subscribe to it. */
export const TASK_EVENTS_APPLIED_SUBJECT = "berth.cluster.task-events-applied";
/**
 * Core NATS, coordinator → coordinators: tasks just queued (their live state, JSON), so every
 * coordinator's demand — what its container manager scales from — holds every waiting task.
 */
export const TASKS_CREATED_SUBJECT = "berth.cluster.tasks-created";
/** The relaying coordinator's id, so it skips its own relay. */
const RELAY_FROM = "Berth-Coordinator";
const ns = (ms: number) => ms * 1_000_000;

export class TaskEventConsumer {
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> | undefined;
  private outputSub: Subscription | undefined;
  private relaySub: Subscription | undefined;
  private createdSub: Subscription | undefined;
  private readonly decoder = new TextDecoder();
  /** This process among the coordinators (relay headers). */
  private readonly self = randomUUID();

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
    this.createdSub = this.nc.subscribe(TASKS_CREATED_SUBJECT, {
      callback: (_e, m) => {
        if (m.headers?.get(RELAY_FROM) === this.self) return;
        try {
          this.onCreated(JSON.parse(this.decoder.decode(m.data)) as LiveTask[]);
        } catch (e) {
          this.log.warn({ err: describeError(e) }, "cannot take in tasks another coordinator queued");
        }
      },
    });
    this.relaySub = this.nc.subscribe(TASK_EVENTS_APPLIED_SUBJECT, {
      callback: (_e, m) => {
        if (m.headers?.get(RELAY_FROM) === this.self) return;
        void this.onRelayed(m.data).catch((e) =>
          this.log.warn({ err: describeError(e) }, "cannot apply a task event another coordinator relayed"),
        );
      },
    });
  }

  async stop(): Promise<void> {
    this.outputSub?.unsubscribe();
    this.relaySub?.unsubscribe();
    this.createdSub?.unsubscribe();
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
    // A batch is acknowledged once every event in it is committed, then relayed to the other coordinators.
    let left = events.length;
    const ackOne = () => {
      if (--left > 0) return;
      m.ack();
      this.relay(m.data);
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

  /**
   * Tells the other coordinators of tasks just written and not yet published to their queue: sent
   * before any runner can take them, so it comes before any event of theirs (which another
   * coordinator relays only after an agent ran the task and its event was committed).
   */
  announceCreated(tasks: LiveTask[]): void {
    if (tasks.length === 0) return;
    const h = headers();
    h.set(RELAY_FROM, this.self);
    try {
      this.nc.publish(TASKS_CREATED_SUBJECT, new TextEncoder().encode(JSON.stringify(tasks)), { headers: h });
    } catch (e) {
      this.log.warn({ err: describeError(e) }, "cannot tell the other coordinators of queued tasks");
    }
  }

  private onCreated(tasks: LiveTask[]): void {
    const stubs = new Set<string>();
    for (const t of Array.isArray(tasks) ? tasks : []) {
      if (!t || typeof t.id !== "string" || typeof t.stubId !== "string" || this.engine.index.get(t.id))
        continue;
      if (isTerminal(t.status)) continue;
      this.engine.index.add({ ...t }, true);
      stubs.add(t.stubId);
    }
    for (const stubId of stubs) this.engine.index.notify(stubId);
  }

  /** Relays an event this coordinator committed by its own decision (a dead coordinator's direct task ended). */
  relayEvent(ev: TaskEvent): void {
    this.relay(new TextEncoder().encode(JSON.stringify(ev)));
  }

  private relay(data: Uint8Array): void {
    const h = headers();
    h.set(RELAY_FROM, this.self);
    try {
      this.nc.publish(TASK_EVENTS_APPLIED_SUBJECT, data, { headers: h });
    } catch (e) {
      // The row is written; another coordinator's copy catches up at its next read of the row.
      this.log.warn({ err: describeError(e) }, "cannot relay a task event to the other coordinators");
    }
  }

  /**
   * An event another coordinator committed: applied to this coordinator's live copy of the task,
   * or to a copy loaded for a watcher here (a stream opened on this coordinator for a task it
   * does not track). A task this coordinator neither tracks nor watches needs nothing.
   */
  private async onRelayed(data: Uint8Array): Promise<void> {
    const body = JSON.parse(this.decoder.decode(data)) as TaskEvent | TaskEventBatch;
    const events =
      body && body.type === "batch" && Array.isArray(body.events) ? body.events : [body as TaskEvent];
    for (const ev of events) {
      if (!ev || typeof ev.taskId !== "string" || typeof ev.attempt !== "number") continue;
      let t = this.engine.index.get(ev.taskId);
      if (!t && this.engine.isWatched(ev.taskId)) {
        const row = await this.tasks.get(ev.taskId).catch(() => undefined);
        t = this.engine.index.get(ev.taskId);
        if (!t && row) {
          t = liveFromRecord(row);
          // The row is already past this event when it is ended: the watcher reads the row itself.
          if (isTerminal(row.status)) continue;
          this.engine.index.add(t, true);
        }
      }
      if (t) this.engine.observe(t, ev);
    }
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
