// The agent's side of tasks (docs/tasks.md, steps 6 and the status table):
// pulls one message from the stub's durable consumer when a runner asks,
// decides expiry, exhausted retries and cancellation on delivery, keeps the
// message in progress while the task runs, enforces its timeout, and turns
// the runner's result or its container's death into task events and an
// ack, nak or term. One TaskWorker per agent; one slot per runner container.

import type { Consumer, JetStreamClient, JsMsg, Subscription } from "nats";
import { describeError } from "../../shared/errors.ts";
import {
  TASK_CANCEL_SUBJECT,
  type TaskCancelMessage,
  type TaskError,
  type TaskEvent,
  TaskHeaders,
  TASKS_STREAM,
  stubConsumerName,
  taskEventSubject,
  taskOutputSubject,
} from "../../shared/tasks.ts";
import { BridgeError } from "./bridge-error.ts";
import type {
  InFlight,
  RunnerSlotInfo,
  Slot,
  TaskAssignment,
  TaskWorkerLogger,
  TaskWorkerOptions,
} from "./types.ts";
import { RecentSet } from "./recent-set.ts";
import { checkResult, type ResultBody } from "./result.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const silent: TaskWorkerLogger = { info() {}, warn() {}, error() {} };

const headerNumber = (msg: JsMsg, name: string, fallback: number): number => {
  const v = msg.headers?.get(name);
  const n = v ? Number(v) : Number.NaN;
  return Number.isFinite(n) ? n : fallback;
};

const taskError = (type: string, message: string): TaskError => ({ type, message, traceback: "" });

export class TaskWorker {
  private readonly js: JetStreamClient;
  private readonly log: TaskWorkerLogger;
  private readonly slots = new Map<string, Slot>();
  private readonly consumers = new Map<string, Promise<Consumer>>();
  private readonly cancelled: RecentSet;
  /** Tasks this agent ended for their timeout: a late call from the runner gets 410, not 404. */
  private readonly timedOutTasks: RecentSet;
  private readonly pullWaitMs: number;
  private readonly workingIntervalMs: number;
  private sub?: Subscription;

  constructor(private readonly o: TaskWorkerOptions) {
    this.js = o.nc.jetstream();
    this.log = o.logger ?? silent;
    this.pullWaitMs = o.pullWaitMs ?? 25_000;
    this.workingIntervalMs = o.workingIntervalMs ?? 10_000;
    this.cancelled = new RecentSet(o.cancelMemoryMs ?? 600_000, 100_000);
    this.timedOutTasks = new RecentSet(o.cancelMemoryMs ?? 600_000, 10_000);
  }

  /** Subscribes to cancels; resolves once the server has the subscription. */
  async start(): Promise<void> {
    this.sub = this.o.nc.subscribe(TASK_CANCEL_SUBJECT, {
      callback: (err, m) => {
        if (err) return;
        try {
          this.onCancel(JSON.parse(dec.decode(m.data)) as TaskCancelMessage);
        } catch (e) {
          this.log.warn({ err: describeError(e) }, "ignoring a malformed task cancel message");
        }
      },
    });
    await this.o.nc.flush();
  }

  /** Unsubscribes; in-flight messages are left to JetStream's redelivery. */
  close(): void {
    this.sub?.unsubscribe();
    for (const slot of this.slots.values()) {
      for (const t of slot.inFlight.values()) this.settle(t);
    }
    this.slots.clear();
  }

  addSlot(info: RunnerSlotInfo): void {
    this.slots.set(info.containerId, { ...info, inFlight: new Map(), pulls: new Set(), closed: false });
  }

  /** The container is gone: tasks it still held count as a crash. */
  removeSlot(containerId: string): void {
    const slot = this.slots.get(containerId);
    if (!slot) return;
    if (slot.inFlight.size > 0) this.containerExited(containerId, undefined);
    this.closeSlot(slot);
    this.slots.delete(containerId);
  }

  /** No more tasks for this container; its waiting pulls end so no message is delivered to them. */
  private closeSlot(slot: Slot): void {
    slot.closed = true;
    for (const stop of slot.pulls) stop();
  }

  private slot(containerId: string): Slot {
    const s = this.slots.get(containerId);
    if (!s || s.closed)
      throw new BridgeError(410, "failed_precondition", `container ${containerId} takes no more tasks`);
    return s;
  }

  private consumer(stubId: string): Promise<Consumer> {
    let c = this.consumers.get(stubId);
    if (!c) {
      c = this.js.consumers.get(TASKS_STREAM, stubConsumerName(stubId));
      this.consumers.set(stubId, c);
      c.catch(() => this.consumers.delete(stubId));
    }
    return c;
  }

  /**
   * One task for the runner of `containerId`, or undefined when none came
   * within the pull wait. Aborting `signal` (the runner stopped waiting)
   * withdraws the pull, so the message goes to another runner.
   */
  async next(containerId: string, signal: AbortSignal): Promise<TaskAssignment | undefined> {
    const slot = this.slot(containerId);
    if (slot.inFlight.size + slot.pulls.size >= slot.workers) {
      throw new BridgeError(
        409,
        "conflict",
        `this container already holds ${slot.inFlight.size} task(s) and waits for ${slot.pulls.size} (workers=${slot.workers})`,
      );
    }
    let consumer: Consumer;
    try {
      consumer = await this.consumer(slot.stubId);
    } catch (e) {
      throw new BridgeError(
        503,
        "unavailable",
        `the task queue of stub ${slot.stubId} is not ready: ${describeError(e)}`,
      );
    }
    const deadline = Date.now() + this.pullWaitMs;
    for (;;) {
      const wait = deadline - Date.now();
      if (wait < 1000 || signal.aborted || slot.closed) return undefined;
      const msg = await this.pullOne(slot, consumer, wait, signal);
      if (!msg) return undefined;
      if (signal.aborted || slot.closed) {
        // It arrived as the pull was withdrawn: counted as a delivery, but nobody is there to run it.
        msg.nak();
        return undefined;
      }
      const task = await this.take(slot, msg);
      if (task) return task;
    }
  }

  private async pullOne(
    slot: Slot,
    consumer: Consumer,
    waitMs: number,
    signal: AbortSignal,
  ): Promise<JsMsg | undefined> {
    let batch: Awaited<ReturnType<Consumer["fetch"]>>;
    try {
      batch = await consumer.fetch({ max_messages: 1, expires: waitMs });
    } catch (e) {
      throw new BridgeError(503, "unavailable", `cannot pull from the task queue: ${describeError(e)}`);
    }
    const stop = () => batch.stop();
    slot.pulls.add(stop);
    signal.addEventListener("abort", stop, { once: true });
    try {
      for await (const m of batch) return m;
      return undefined;
    } catch (e) {
      if (signal.aborted || slot.closed) return undefined;
      throw new BridgeError(503, "unavailable", `pulling from the task queue failed: ${describeError(e)}`);
    } finally {
      signal.removeEventListener("abort", stop);
      slot.pulls.delete(stop);
    }
  }

  private base(slot: Slot, taskId: string, attempt: number) {
    return {
      taskId,
      stubId: slot.stubId,
      workspaceId: slot.workspaceId,
      agentId: this.o.agentId,
      containerId: slot.containerId,
      attempt,
      at: Date.now(),
    };
  }

  private async publish(e: TaskEvent): Promise<void> {
    // The message id lets JetStream drop a duplicate when a publish is retried.
    const detail = e.type === "finished" ? e.status : "";
    await this.js.publish(taskEventSubject(this.o.agentId, e.taskId), enc.encode(JSON.stringify(e)), {
      msgID: `${e.taskId}:${e.attempt}:${e.type}${detail}`,
    });
  }

  /** Decides what a delivery means; an assignment when the runner should run it. */
  private async take(slot: Slot, msg: JsMsg): Promise<TaskAssignment | undefined> {
    const taskId = msg.headers?.get(TaskHeaders.taskId) ?? "";
    const attempt = msg.info.redeliveryCount;
    if (!taskId) {
      this.log.error({ stubId: slot.stubId, seq: msg.seq }, "a task message without a task id: terminated");
      msg.term();
      return undefined;
    }
    if (this.cancelled.has(taskId)) {
      msg.term();
      return undefined;
    }
    const base = this.base(slot, taskId, attempt);
    const expiresAt = headerNumber(msg, TaskHeaders.expiresAt, 0);
    const maxRetries = Math.max(0, headerNumber(msg, TaskHeaders.maxRetries, 0));
    try {
      if (expiresAt > 0 && Date.now() > expiresAt) {
        await this.publish({
          ...base,
          type: "finished",
          status: "EXPIRED",
          reason: "expired",
          error: taskError(
            "TaskExpired",
            `the task expired at ${new Date(expiresAt).toISOString()} before it started`,
          ),
        });
        msg.term();
        return undefined;
      }
      if (attempt > maxRetries + 1) {
        await this.publish({
          ...base,
          type: "finished",
          status: "FAILED",
          reason: "retries_exhausted",
          error: taskError(
            "RetriesExhausted",
            `the task was delivered ${attempt} times and allows ${maxRetries} retries (an earlier attempt was lost)`,
          ),
        });
        msg.term();
        return undefined;
      }
    } catch (e) {
      // The verdict could not be recorded: leave the message for a later delivery.
      msg.nak();
      throw new BridgeError(503, "unavailable", `cannot record task ${taskId}: ${describeError(e)}`);
    }
    const timeoutS = headerNumber(msg, TaskHeaders.timeout, -1);
    const t: InFlight = { msg, taskId, attempt, maxRetries, slot, started: Promise.resolve(), timers: [] };
    // Answering the runner does not wait for `started`: both events of the
    // task go out in order on one connection, and every later event waits for it.
    t.started = this.publish({ ...base, type: "started" }).catch((e) =>
      this.log.error({ taskId, err: describeError(e) }, "publishing task started"),
    );
    t.timers.push(setInterval(() => msg.working(), this.workingIntervalMs));
    if (timeoutS > 0) t.timers.push(setTimeout(() => void this.timedOut(t, timeoutS), timeoutS * 1000));
    slot.inFlight.set(taskId, t);
    return {
      id: taskId,
      args: Buffer.from(msg.data).toString("base64"),
      attempt,
      timeout: timeoutS,
      callback_url: msg.headers?.get(TaskHeaders.callbackUrl) || slot.callbackUrl || "",
      created_at: headerNumber(msg, TaskHeaders.createdAt, 0),
    };
  }

  /** Stops the task's timers and forgets it; false when something else already settled it. */
  private settle(t: InFlight): boolean {
    for (const timer of t.timers) clearTimeout(timer);
    return t.slot.inFlight.delete(t.taskId);
  }

  private inFlight(containerId: string, taskId: string): InFlight {
    const t = this.slots.get(containerId)?.inFlight.get(taskId);
    if (t) return t;
    if (this.cancelled.has(taskId))
      throw new BridgeError(410, "failed_precondition", `task ${taskId} was cancelled`);
    if (this.timedOutTasks.has(taskId)) {
      throw new BridgeError(410, "failed_precondition", `task ${taskId} ran past its timeout and was ended`);
    }
    throw new BridgeError(404, "not_found", `task ${taskId} is not running in this container`);
  }

  output(containerId: string, taskId: string, stream: "stdout" | "stderr", data: string): void {
    this.inFlight(containerId, taskId);
    this.o.nc.publish(
      taskOutputSubject(this.o.agentId, taskId),
      enc.encode(JSON.stringify({ taskId, stream, data, at: Date.now() })),
    );
  }

  /** Throws 410 once the task was cancelled (the runner should stop it). */
  heartbeat(containerId: string, taskId: string): void {
    this.inFlight(containerId, taskId);
  }

  async result(containerId: string, taskId: string, body: unknown): Promise<void> {
    const t = this.inFlight(containerId, taskId);
    const r: ResultBody = checkResult(body);
    if (!this.settle(t)) return;
    const base = this.base(t.slot, taskId, t.attempt);
    await t.started;
    try {
      if (r.status === "COMPLETE" && r.tooLarge) {
        await this.publish({
          ...base,
          type: "finished",
          status: "FAILED",
          reason: "result_too_large",
          error: r.tooLarge,
        });
        t.msg.term();
      } else if (r.status === "COMPLETE") {
        const e: TaskEvent = { ...base, type: "finished", status: "COMPLETE", result: r.result };
        if (r.resultJson !== undefined) e.resultJson = r.resultJson;
        await this.publish(e);
        t.msg.ack();
      } else if (r.retry && t.attempt <= t.maxRetries) {
        await this.publish({ ...base, type: "retry", reason: "retry_for", error: r.error });
        t.msg.nak();
      } else {
        await this.publish({ ...base, type: "finished", status: "FAILED", error: r.error });
        t.msg.term();
      }
    } catch (e) {
      // Not recorded: the task goes back to the queue and runs again.
      t.msg.nak();
      throw new BridgeError(
        503,
        "unavailable",
        `cannot record the result of task ${taskId}: ${describeError(e)}`,
      );
    }
  }

  private async timedOut(t: InFlight, timeoutS: number): Promise<void> {
    if (!this.settle(t)) return;
    this.timedOutTasks.add(t.taskId);
    const kill = this.killContainer(t.slot.containerId, `task ${t.taskId} timed out`);
    await t.started;
    await this.publish({
      ...this.base(t.slot, t.taskId, t.attempt),
      type: "finished",
      status: "TIMEOUT",
      reason: "timeout",
      error: taskError(
        "TaskTimeout",
        `the task ran longer than its timeout of ${timeoutS} s; its container was killed`,
      ),
    }).catch((e) => this.log.error({ taskId: t.taskId, err: describeError(e) }, "publishing task timeout"));
    t.msg.term();
    await kill;
  }

  /** The runner container ended: each task it held is retried or, on its last attempt, failed. */
  containerExited(containerId: string, exitCode: number | undefined): void {
    const slot = this.slots.get(containerId);
    if (!slot) return;
    this.closeSlot(slot);
    const code = exitCode === undefined ? "unknown" : String(exitCode);
    for (const t of [...slot.inFlight.values()]) {
      if (!this.settle(t)) continue;
      const base = this.base(slot, t.taskId, t.attempt);
      void (async () => {
        await t.started;
        if (t.attempt <= t.maxRetries) {
          await this.publish({ ...base, type: "retry", reason: `container_exited: exit code ${code}` });
          t.msg.nak();
        } else {
          await this.publish({
            ...base,
            type: "finished",
            status: "FAILED",
            reason: "container_exited",
            error: taskError("ContainerExited", `container exited with code ${code} on the last attempt`),
          });
          t.msg.term();
        }
      })().catch((e) => {
        this.log.error(
          { taskId: t.taskId, err: describeError(e) },
          "recording a task whose container exited",
        );
        t.msg.nak();
      });
    }
  }

  private onCancel(m: TaskCancelMessage): void {
    if (typeof m?.taskId !== "string" || m.taskId === "") return;
    this.cancelled.add(m.taskId);
    for (const slot of this.slots.values()) {
      const t = slot.inFlight.get(m.taskId);
      if (!t || !this.settle(t)) continue;
      // No event: the coordinator recorded the cancel (or expiry) itself.
      t.msg.term();
      void this.killContainer(
        slot.containerId,
        `task ${m.taskId} was ${m.status === "EXPIRED" ? "expired" : "cancelled"}`,
      );
    }
  }

  private async killContainer(containerId: string, why: string): Promise<void> {
    const slot = this.slots.get(containerId);
    if (slot) this.closeSlot(slot);
    this.log.info({ containerId }, `stopping the runner container: ${why}`);
    try {
      await this.o.kill(containerId);
    } catch (e) {
      this.log.error({ containerId, err: describeError(e) }, "stopping a runner container");
    }
  }
}
