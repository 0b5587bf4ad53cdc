// The agent's side of tasks (docs/tasks.md, steps 6 and the status table):
// pulls one message from the stub's durable consumer when a runner asks,
// decides expiry, exhausted retries and cancellation on delivery, keeps the
// message in progress while the task runs, enforces its timeout, and turns
// the runner's result or its container's death into task events and an
// ack, nak or term. One TaskWorker per agent; one slot per runner container.

import type { Consumer, JetStreamClient, JsMsg, Subscription } from "nats";
import { TaskEventPublisher } from "./event-publisher.ts";
import { describeError } from "../../shared/errors.ts";
import {
  TASK_CANCEL_SUBJECT,
  type TaskCancelMessage,
  TaskHeaders,
  TASKS_STREAM,
  stubConsumerName,
  taskOutputSubject,
} from "../../shared/tasks.ts";
import { BridgeError } from "./bridge-error.ts";
import type {
  HandOut,
  InFlight,
  RunnerSlotInfo,
  Slot,
  TaskAssignment,
  TaskWorkerLogger,
  TaskWorkerOptions,
} from "./types.ts";
import { assignment, dropHeldStart, foldedStart, settle, unhand } from "./in-flight.ts";
import { endedOnDelivery, headerNumber, pullOne, pullQueued, taskError } from "./pulls.ts";
import { ConfigVersions, idleAsk } from "./config-versions.ts";
import { recordCrash, recordResult } from "./outcomes.ts";
import { type LimitHit, limitOfCrash, limitOfResult, readLimit } from "./limits.ts";
import type { ExitReason } from "../../api/index.ts";
import { ReadyQueues } from "./ready-queues.ts";
import { RecentSet } from "./recent-set.ts";
import { checkResult, type ResultBody } from "./result.ts";
import { TaskTrace } from "./trace.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
/** Most tasks one runner worker is handed at once (it asks for a batch when its tasks are short). */
export const MAX_HAND_OUT = 64;
const silent: TaskWorkerLogger = { info() {}, warn() {}, error() {} };

export class TaskWorker {
  private readonly js: JetStreamClient;
  private readonly events: TaskEventPublisher;
  private readonly log: TaskWorkerLogger;
  private readonly slots = new Map<string, Slot>();
  private readonly consumers = new Map<string, Promise<Consumer>>();
  /** Released by a runner before it started them: the next runner of the stub on this agent takes them first. */
  private readonly ready: ReadyQueues;
  private readonly versions = new ConfigVersions();
  /** Per stub: messages left in its queue after the last one this agent pulled. */
  private readonly pendingHint = new Map<string, number>();
  private readonly cancelled: RecentSet;
  /** Tasks this agent ended for their timeout: a late call from the runner gets 410, not 404. */
  private readonly timedOutTasks: RecentSet;
  private readonly pullWaitMs: number;
  private readonly workingIntervalMs: number;
  private readonly startedDelayMs: number;
  private readonly trace: TaskTrace;
  private sub?: Subscription;

  constructor(private readonly o: TaskWorkerOptions) {
    this.js = o.nc.jetstream();
    this.events = new TaskEventPublisher(this.js, o.agentId);
    this.log = o.logger ?? silent;
    this.pullWaitMs = o.pullWaitMs ?? 25_000;
    this.workingIntervalMs = o.workingIntervalMs ?? 10_000;
    this.startedDelayMs = o.startedDelayMs ?? 50;
    this.trace = o.trace ?? new TaskTrace();
    this.ready = new ReadyQueues(o.readyHoldMs ?? 30_000, this.trace);
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

  /** Unsubscribes; in-flight messages are left to JetStream's redelivery. The trace's last lines are written. */
  close(): void {
    this.sub?.unsubscribe();
    for (const slot of this.slots.values()) {
      for (const t of slot.inFlight.values()) settle(t);
    }
    this.ready.clear(false);
    this.slots.clear();
    this.trace.close();
  }

  addSlot(info: RunnerSlotInfo): void {
    this.versions.note(info.stubId, info.configVersion);
    this.slots.set(info.containerId, {
      ...info,
      inFlight: new Map(),
      handOuts: new Set(),
      pulls: new Set(),
      closed: false,
      pidsRefused: readLimit(this.o.limits, this.log, info.containerId, (l, id) => l.pidsRefused(id)),
    });
  }

  /** The container is gone: tasks it still held count as a crash. */
  removeSlot(containerId: string): void {
    const slot = this.slots.get(containerId);
    if (!slot) return;
    if (slot.inFlight.size > 0) this.containerExited(containerId, undefined);
    this.closeSlot(slot);
    this.slots.delete(containerId);
    if (![...this.slots.values()].some((s) => s.stubId === slot.stubId)) this.versions.forget(slot.stubId);
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
   * Up to `max` tasks for one runner worker of `containerId`, run in order;
   * empty when none came within the pull wait. More than one only when that
   * many are queued right now: a batch never waits to fill. Aborting `signal`
   * (the runner stopped waiting) withdraws the pull, so the message goes to
   * another runner.
   */
  async next(containerId: string, signal: AbortSignal, max = 1): Promise<TaskAssignment[]> {
    const slot = this.slot(containerId);
    if (slot.onFirstAsk) {
      const first = slot.onFirstAsk;
      slot.onFirstAsk = undefined;
      first();
    }
    if (slot.handOuts.size + slot.pulls.size >= slot.workers) {
      throw new BridgeError(
        409,
        "conflict",
        `this container already holds ${slot.inFlight.size} task(s) and waits for ${slot.pulls.size} (workers=${slot.workers})`,
      );
    }
    const want = Math.max(1, Math.min(MAX_HAND_OUT, Math.floor(max) || 1));
    const handOut: HandOut = { tasks: [] };
    this.fromReady(slot, handOut, want);
    // A container of an older config than the stub's takes no new task (config-versions.ts).
    if (handOut.tasks.length === 0 && this.versions.outdated(slot)) {
      await idleAsk(slot, this.pullWaitMs, signal);
      return [];
    }
    let consumer: Consumer | undefined;
    if (handOut.tasks.length < want && !this.versions.outdated(slot)) {
      try {
        consumer = await this.consumer(slot.stubId);
      } catch (e) {
        if (handOut.tasks.length === 0) {
          throw new BridgeError(
            503,
            "unavailable",
            `the task queue of stub ${slot.stubId} is not ready: ${describeError(e)}`,
          );
        }
      }
    }
    // A no-wait pull first only while the queue was seen non-empty: a warm
    // container's lone task should not pay for a pull that finds nothing.
    if (consumer && want > 1 && (this.pendingHint.get(slot.stubId) ?? 0) > 0)
      await this.topUp(slot, handOut, want);
    const deadline = Date.now() + this.pullWaitMs;
    while (consumer && handOut.tasks.length === 0) {
      const wait = deadline - Date.now();
      if (wait < 1000 || signal.aborted || slot.closed) break;
      const msg = await pullOne(
        this.o.nc,
        slot,
        wait,
        signal,
        () => this.ready.has(slot.stubId, (r) => this.versions.fits(slot, r)),
        this.trace,
      );
      if (msg && (signal.aborted || slot.closed)) {
        // It arrived as the pull was withdrawn: counted as a delivery, but nobody is there to run it.
        if (this.trace.on) this.trace.event("nak-withdrawn", { task: msg.headers?.get(TaskHeaders.taskId) });
        msg.nak();
        break;
      }
      if (msg) {
        this.pendingHint.set(slot.stubId, msg.info.pending);
        const t = await this.take(slot, msg);
        if (t && !this.versions.fits(slot, t)) {
          // Submitted for a newer config: it waits on this agent for a container of that config.
          this.hold(slot.stubId, [t]);
          break;
        }
        if (t) this.hand(slot, handOut, t);
        if (want > 1 && msg.info.pending > 0) await this.topUp(slot, handOut, want);
      }
      // A pull also ends early when a runner released tasks this one can take.
      if (!signal.aborted && !slot.closed) this.fromReady(slot, handOut, want);
    }
    if (this.trace.on)
      this.trace.event("next-end", {
        c: slot.containerId.slice(-8),
        want,
        got: handOut.tasks.length,
        aborted: signal.aborted,
      });
    return handOut.tasks.map((t) => assignment(t));
  }

  /** Adds what is queued right now to the hand-out, up to `want`. */
  private async topUp(slot: Slot, handOut: HandOut, want: number): Promise<void> {
    if (handOut.tasks.length >= want) return;
    const msgs = await pullQueued(this.o.nc, slot, want - handOut.tasks.length, this.log, this.trace);
    const last = msgs.at(-1);
    this.pendingHint.set(slot.stubId, last ? last.info.pending : 0);
    for (const msg of msgs) {
      const t = await this.take(slot, msg);
      if (t && !this.versions.fits(slot, t)) this.hold(slot.stubId, [t]);
      else if (t) this.hand(slot, handOut, t);
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

  /** Decides what a delivery means; the task when a runner should run it. */
  private async take(slot: Slot, msg: JsMsg): Promise<InFlight | undefined> {
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
    const maxRetries = Math.max(0, headerNumber(msg, TaskHeaders.maxRetries, 0));
    const configVersion = Math.max(0, headerNumber(msg, TaskHeaders.configVersion, 0));
    this.versions.note(slot.stubId, configVersion);
    try {
      const ended = endedOnDelivery(msg, attempt, maxRetries, Date.now());
      if (ended) {
        await this.events.publish({ ...this.base(slot, taskId, attempt), ...ended });
        msg.term();
        return undefined;
      }
    } catch (e) {
      // The verdict could not be recorded: leave the message for a later delivery.
      msg.nak();
      throw new BridgeError(503, "unavailable", `cannot record task ${taskId}: ${describeError(e)}`);
    }
    return {
      msg,
      taskId,
      attempt,
      maxRetries,
      timeoutS: headerNumber(msg, TaskHeaders.timeout, -1),
      callbackUrl: msg.headers?.get(TaskHeaders.callbackUrl) || slot.callbackUrl || "",
      createdAt: headerNumber(msg, TaskHeaders.createdAt, 0),
      configVersion,
      slot: undefined,
      handOut: undefined,
      handedAt: 0,
      started: undefined,
      startTimer: undefined,
      timeoutTimer: undefined,
      workingTimer: setInterval(() => msg.working(), this.workingIntervalMs),
    };
  }

  /** Gives the task to a runner worker: its start (held back briefly) and its timeout begin now. */
  private hand(slot: Slot, handOut: HandOut, t: InFlight): void {
    t.slot = slot;
    t.handOut = handOut;
    t.handedAt = Date.now();
    if (!t.started) {
      t.startTimer = setTimeout(() => {
        t.startTimer = undefined;
        if (!t.slot) return;
        t.started = this.events
          .publish({ ...this.base(t.slot, t.taskId, t.attempt), type: "started", at: t.handedAt })
          .catch((e) =>
            this.log.error({ taskId: t.taskId, err: describeError(e) }, "publishing task started"),
          );
      }, this.startedDelayMs);
    }
    if (t.timeoutS > 0)
      t.timeoutTimer = setTimeout(() => void this.timedOut(t, t.timeoutS), t.timeoutS * 1000);
    if (handOut.tasks.length === 0) slot.handOuts.add(handOut);
    if (this.trace.on)
      this.trace.event("hand", { task: t.taskId, c: slot.containerId.slice(-8), i: handOut.tasks.length });
    handOut.tasks.push(t);
    slot.inFlight.set(t.taskId, t);
  }

  /** Takes released tasks of the slot's stub (of its config or older) into the hand-out, up to `want` in all. */
  private fromReady(slot: Slot, handOut: HandOut, want: number): void {
    while (handOut.tasks.length < want) {
      const t = this.ready.shift(slot.stubId, (r) => this.versions.fits(slot, r));
      if (!t) return;
      this.hand(slot, handOut, t);
    }
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
      enc.encode(JSON.stringify({ taskId, containerId, stream, data, at: Date.now() })),
    );
  }

  /** Throws 410 once the task was cancelled (the runner should stop it). */
  heartbeat(containerId: string, taskId: string): void {
    this.inFlight(containerId, taskId);
  }

  /**
   * The runner did not start these tasks of its hand-out (one before them
   * runs long): another runner of the stub on this agent takes them, without
   * a redelivery that would count as an attempt.
   */
  release(containerId: string, taskIds: string[]): number {
    const slot = this.slots.get(containerId);
    const held: InFlight[] = [];
    for (const id of taskIds) {
      const t = slot?.inFlight.get(id);
      if (!t || !slot) continue;
      unhand(t);
      dropHeldStart(t);
      held.push(t);
      if (this.trace.on) this.trace.event("release", { task: id, c: containerId.slice(-8) });
    }
    if (slot) this.hold(slot.stubId, held);
    return held.length;
  }

  /** Tasks wait on this agent for a runner of their stub; one waiting in a pull takes them now rather than after it. */
  private hold(stubId: string, tasks: InFlight[]): void {
    for (const t of tasks) this.ready.push(stubId, t);
    if (tasks.length === 0) return;
    if (this.trace.on) this.trace.event("hold", { tasks: tasks.map((t) => t.taskId) });
    for (const other of this.slots.values()) {
      if (other.stubId !== stubId || other.closed) continue;
      if (this.trace.on)
        this.trace.event("hold-wake", { c: other.containerId.slice(-8), pulls: other.pulls.size });
      for (const stop of other.pulls) stop();
    }
  }

  /** One result from the runner; the event is published (batched with others of the same moment) before the ack. */
  async result(containerId: string, taskId: string, body: unknown): Promise<void> {
    const t = this.inFlight(containerId, taskId);
    const r: ResultBody = checkResult(body);
    const slot = t.slot as Slot;
    if (this.trace.on)
      this.trace.event("result", { task: taskId, c: containerId.slice(-8), status: r.status });
    if (!settle(t)) return;
    const limit = limitOfResult(this.o.limits, slot, r, this.log);
    const base = { ...this.base(slot, taskId, t.attempt), ...(await foldedStart(t, r.startedAt)) };
    try {
      await recordResult(this.events, this.trace, base, t, r, limit);
      // A full disk or leftover processes at the pids limit would fail the
      // next task too: the container is replaced, as after an OOM kill.
      if (limit) void this.killContainer(slot.containerId, `task ${taskId} ended ${limit.reason}`);
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
    const slot = t.slot;
    if (!slot || !settle(t)) return;
    this.timedOutTasks.add(t.taskId);
    const kill = this.killContainer(slot.containerId, `task ${t.taskId} timed out`);
    const start = await foldedStart(t);
    await this.events
      .publish({
        ...this.base(slot, t.taskId, t.attempt),
        ...start,
        type: "finished",
        status: "TIMEOUT",
        reason: "timeout",
        error: taskError(
          "TaskTimeout",
          `the task ran longer than its timeout of ${timeoutS} s; its container was killed`,
        ),
      })
      .catch((e) => this.log.error({ taskId: t.taskId, err: describeError(e) }, "publishing task timeout"));
    t.msg.term();
    await kill;
  }

  /**
   * The runner container ended. In each hand-out the first unanswered task
   * was running: it is retried or, on its last attempt, failed. The rest of
   * that hand-out never started and goes to the ready queue untouched.
   */
  containerExited(
    containerId: string,
    exitCode: number | undefined,
    reason?: ExitReason,
    memoryBytes?: number,
  ): void {
    const slot = this.slots.get(containerId);
    if (!slot) return;
    this.closeSlot(slot);
    const code = exitCode === undefined ? "unknown" : String(exitCode);
    const busy = slot.handOuts.size > 0;
    const limit =
      busy && reason !== "oom_killed" ? limitOfCrash(this.o.limits, slot, code, this.log) : undefined;
    const held: InFlight[] = [];
    for (const handOut of [...slot.handOuts]) {
      const [running, ...unstarted] = handOut.tasks;
      for (const t of unstarted) {
        unhand(t);
        dropHeldStart(t);
        held.push(t);
      }
      if (running) this.crashed(slot, running, code, reason, limit, memoryBytes);
    }
    // Another runner of the stub waiting in a pull takes them now, not after its pull expires.
    this.hold(slot.stubId, held);
  }

  private crashed(
    slot: Slot,
    t: InFlight,
    code: string,
    reason: ExitReason | undefined,
    limit: LimitHit | undefined,
    memoryBytes?: number,
  ): void {
    if (!settle(t)) return;
    void (async () => {
      const base = { ...this.base(slot, t.taskId, t.attempt), ...(await foldedStart(t)) };
      await recordCrash(this.events, base, t, { code, reason, limit, memoryBytes, gangRank: slot.gangRank });
    })().catch((e) => {
      this.log.error({ taskId: t.taskId, err: describeError(e) }, "recording a task whose container exited");
      t.msg.nak();
    });
  }

  private onCancel(m: TaskCancelMessage): void {
    if (typeof m?.taskId !== "string" || m.taskId === "") return;
    this.cancelled.add(m.taskId);
    const waiting = this.ready.remove(m.taskId);
    if (waiting) {
      clearInterval(waiting.workingTimer);
      waiting.msg.term();
    }
    for (const slot of this.slots.values()) {
      const t = slot.inFlight.get(m.taskId);
      if (!t) continue;
      dropHeldStart(t);
      if (!settle(t)) continue;
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
