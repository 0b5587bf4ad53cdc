// Applies task status changes: to the in-memory index at once (watchers hear
// of them immediately), to the store in batches. Knows nothing of NATS.

import type { Logger } from "pino";
import type { TaskError, TaskEvent, TaskStatus } from "../../shared/tasks.ts";
import type { TaskHistoryEntry, TaskPatch, TaskRecord, TaskRepo } from "./store.ts";
import { BatchWriter, type BatchWriterOptions } from "./batch-writer.ts";
import { type LiveTask, LiveIndex, liveFromRecord, recordFromLive } from "./live-index.ts";
import { isTerminal, mayEnd, stepsFor } from "./transitions.ts";
import { FOLD_MS, type Unwritten, UnwrittenTasks } from "./unwritten.ts";

/** What a watcher of a task hears. */
export type TaskUpdate =
  | { type: "status"; taskId: string; status: TaskStatus; attempt: number }
  | { type: "output"; taskId: string; stream: "stdout" | "stderr"; data: string }
  | {
      type: "result";
      taskId: string;
      status: TaskStatus;
      /** base64 pickle (COMPLETE). */
      result: string | null;
      resultJson: string | null;
      error: TaskError | null;
    };

export type TaskListener = (u: TaskUpdate) => void;

/** Hears every status a task takes, in order; `from` null: the task was just created (PENDING). */
export type TaskStatusListener = (t: LiveTask, from: TaskStatus | null, to: TaskStatus) => void;

export class TaskEngine {
  readonly index = new LiveIndex();
  readonly writer: BatchWriter;
  private readonly watchers = new Map<string, Set<TaskListener>>();
  /** Attempts moved to RETRY because their agent was lost, by task (presumeLost); dropped once the task ends. */
  private readonly lostAttempts = new Map<string, number>();
  private readonly unwritten: UnwrittenTasks;

  constructor(
    repo: TaskRepo,
    private readonly log: Logger,
    /** Called once a task's final row is committed (callbacks). */
    private readonly onFinished: (t: LiveTask) => void,
    writerOptions?: BatchWriterOptions,
    /** How long a task added with addUnwritten may stay unwritten (ms). @default FOLD_MS */
    foldMs = FOLD_MS,
    /** Workspace events (coordinator/events): called synchronously, so it must not block. */
    private readonly onStatus?: TaskStatusListener,
  ) {
    this.writer = new BatchWriter(repo, log, writerOptions);
    this.unwritten = new UnwrittenTasks(foldMs, (u) => this.writeRow(u));
  }

  /**
   * Tracks a new task whose row is written only when it ends or once it has
   * been open for `foldMs` (coordinator/tasks/unwritten.ts), with its history.
   */
  addUnwritten(t: LiveTask): void {
    this.index.add(t);
    this.unwritten.add(t);
    this.created(t);
  }

  /** Announces a task just created (the caller added it to the index). */
  created(t: LiveTask): void {
    this.statusChanged(t, null, t.status);
  }

  /** Whether the task's row has not been queued for writing yet. */
  isUnwritten(taskId: string): boolean {
    return this.unwritten.has(taskId);
  }

  /** The history of a task whose row is not written yet, else undefined. */
  unwrittenHistory(taskId: string): TaskHistoryEntry[] | undefined {
    return this.unwritten.history(taskId);
  }

  /** Writes every row still unwritten and everything queued, then stops the writer. */
  async stop(): Promise<void> {
    for (const u of this.unwritten.takeAll()) this.writeRow(u);
    await this.writer.stop();
  }

  watch(taskIds: Iterable<string>, listener: TaskListener): () => void {
    const ids = [...taskIds];
    for (const id of ids) {
      let set = this.watchers.get(id);
      if (!set) {
        set = new Set();
        this.watchers.set(id, set);
      }
      set.add(listener);
    }
    return () => {
      for (const id of ids) {
        const set = this.watchers.get(id);
        if (!set) continue;
        set.delete(listener);
        if (set.size === 0) this.watchers.delete(id);
      }
    };
  }

  isWatched(taskId: string): boolean {
    return this.watchers.has(taskId);
  }

  emit(u: TaskUpdate): void {
    const set = this.watchers.get(u.taskId);
    if (!set) return;
    for (const l of [...set]) {
      try {
        l(u);
      } catch (e) {
        this.log.warn({ err: (e as Error).message, taskId: u.taskId }, "task watcher failed");
      }
    }
  }

  /**
   * Applies an agent's event. Returns whether it changed the task; `ack` runs
   * after the change is committed (at once when the event changed nothing).
   */
  applyEvent(t: LiveTask, ev: TaskEvent, ack: () => void): boolean {
    const steps = stepsFor(t, ev, this.lostAttempts.get(t.id));
    if (steps.length === 0) {
      // A delivery again (or a late event): acknowledged once what the task holds is written, so
      // a first delivery whose write is still pending is never left with no delivery to replay it.
      this.ackAfterWrite(t.id, ack);
      return false;
    }
    const atIso = new Date(ev.at).toISOString();
    const patch: TaskPatch = {
      updatedAt: atIso,
      attempt: Math.max(t.attempt, ev.attempt),
      agentId: ev.agentId,
    };
    t.attempt = patch.attempt as number;
    t.agentId = ev.agentId;
    const foldedAt = foldedStart(ev);
    const folded = foldedAt !== undefined;
    const startIso = folded ? new Date(foldedAt).toISOString() : atIso;
    const from = t.status;
    for (const step of steps) {
      const running = step.status === "RUNNING";
      this.index.setStatus(t, step.status, ev.containerId || null, running ? (foldedAt ?? ev.at) : ev.at);
      if (running && !t.startedAt) {
        t.startedAt = startIso;
        patch.startedAt = startIso;
      }
      this.record({
        taskId: t.id,
        status: step.status,
        attempt: t.attempt,
        containerId: t.containerId,
        reason: running && folded && step.reason === "implied" ? null : step.reason,
        at: running ? startIso : atIso,
      });
    }
    patch.status = t.status;
    patch.containerId = t.containerId;
    takeOutcome(t, ev);
    if (ev.type === "retry" && ev.error) patch.error = t.error;
    if (ev.type === "finished") {
      patch.result = t.result ? Buffer.from(t.result, "base64") : null;
      patch.resultJson = t.resultJson;
      patch.error = t.error;
    }
    t.updatedAt = atIso;
    let prev = from;
    for (const step of steps) {
      this.statusChanged(t, prev, step.status);
      prev = step.status;
    }
    if (!this.unwritten.has(t.id)) this.writer.patch(t.id, patch);
    this.ackAfterWrite(t.id, ack);
    this.announce(t);
    return true;
  }

  /** Runs `ack` once the task's row, as this coordinator holds it now, is committed. */
  private ackAfterWrite(taskId: string, ack: () => void): void {
    if (!this.unwritten.afterCommit(taskId, ack)) this.writer.afterCommit(ack);
  }

  /**
   * Takes in an event another coordinator applied and committed (the relay of
   * coordinator/tasks/event-consumer.ts): this coordinator's live copy of the
   * task and its watchers follow, nothing is written and nothing announced to
   * workspace events or callbacks — the applying coordinator did both. An
   * ended task leaves the index. False when the event changed nothing here.
   */
  observe(t: LiveTask, ev: TaskEvent): boolean {
    // A task whose row this coordinator has not written is its own (a direct task): no one else applies its events.
    if (this.unwritten.has(t.id)) return false;
    const steps = stepsFor(t, ev, this.lostAttempts.get(t.id));
    if (steps.length === 0) return false;
    t.attempt = Math.max(t.attempt, ev.attempt);
    t.agentId = ev.agentId;
    const startAt = foldedStart(ev) ?? ev.at;
    for (const step of steps) {
      const running = step.status === "RUNNING";
      this.index.setStatus(t, step.status, ev.containerId || null, running ? startAt : ev.at);
      if (running && !t.startedAt) t.startedAt = new Date(startAt).toISOString();
    }
    takeOutcome(t, ev);
    t.updatedAt = new Date(ev.at).toISOString();
    if (!isTerminal(t.status)) {
      this.emit({ type: "status", taskId: t.id, status: t.status, attempt: t.attempt });
      return true;
    }
    t.endedAt = t.updatedAt;
    this.closeCopy(t);
    return true;
  }

  /**
   * Takes in the end of a task another coordinator committed whose relay
   * this one missed (catch-up.ts): the live copy becomes the row, it leaves
   * the index and its watchers hear the result. Nothing is written or
   * announced; the coordinator that ended the task did both. False when
   * there was nothing to take in (the copy had ended, or the row had not).
   */
  takeEnded(t: LiveTask, row: TaskRecord): boolean {
    if (isTerminal(t.status) || !isTerminal(row.status) || this.unwritten.has(t.id)) return false;
    const ended = liveFromRecord(row);
    this.index.setStatus(t, row.status, row.containerId, Date.parse(row.updatedAt) || Date.now());
    Object.assign(t, ended);
    this.closeCopy(t);
    return true;
  }

  /**
   * Ends a task by the coordinator's own decision (cancel, expiry, a failed
   * publish, failPending). Returns false when the task has already ended.
   */
  end(t: LiveTask, status: TaskStatus, o: { error?: TaskError; reason: string; at?: number }): boolean {
    if (isTerminal(t.status) || !mayEnd(t.status, status)) return false;
    const at = o.at ?? Date.now();
    const atIso = new Date(at).toISOString();
    const from = t.status;
    this.index.setStatus(t, status, null, at);
    t.updatedAt = atIso;
    if (o.error) t.error = o.error;
    this.statusChanged(t, from, status);
    this.record({
      taskId: t.id,
      status,
      attempt: t.attempt,
      containerId: t.containerId,
      reason: o.reason,
      at: atIso,
    });
    this.patchRow(t.id, { status, updatedAt: atIso, ...(o.error ? { error: o.error } : {}) });
    this.announce(t);
    return true;
  }

  /**
   * A task this coordinator ended with a write already committed (a dead
   * coordinator's direct task, TaskRepo.endIfOpen): its live copy and
   * watchers here follow, status listeners and the callback are told — what
   * end() does, without writing again.
   */
  endCommitted(t: LiveTask, status: TaskStatus, o: { error: TaskError; at: number }): void {
    if (!this.index.get(t.id)) this.index.add(t, true);
    const from = t.status;
    const atIso = new Date(o.at).toISOString();
    this.index.setStatus(t, status, null, o.at);
    t.updatedAt = atIso;
    t.endedAt = atIso;
    t.error = o.error;
    this.statusChanged(t, from, status);
    this.lostAttempts.delete(t.id);
    this.index.remove(t.id);
    this.emit({ type: "result", taskId: t.id, status, result: null, resultJson: null, error: o.error });
    this.onFinished(t);
  }

  /**
   * Moves a RUNNING task to RETRY by the coordinator's own decision: its
   * agent is lost (coordinator/tasks/lost-agents.ts), or its container is
   * preempted for higher-priority work (reason `preempted`). The attempt is
   * remembered: should that agent come back and report the attempt's
   * outcome, it is taken (stepsFor's lostAttempt). False when not RUNNING.
   */
  presumeLost(t: LiveTask, o: { error: TaskError; reason: string; at: number }): boolean {
    if (t.status !== "RUNNING") return false;
    const atIso = new Date(o.at).toISOString();
    this.index.setStatus(t, "RETRY", t.containerId, o.at);
    t.updatedAt = atIso;
    t.error = o.error;
    this.lostAttempts.set(t.id, t.attempt);
    this.statusChanged(t, "RUNNING", "RETRY");
    this.record({
      taskId: t.id,
      status: "RETRY",
      attempt: t.attempt,
      containerId: t.containerId,
      reason: o.reason,
      at: atIso,
    });
    this.patchRow(t.id, { status: "RETRY", updatedAt: atIso, error: o.error });
    this.announce(t);
    return true;
  }

  /** Records a column change that is not a status change (the stream sequence). */
  patch(t: LiveTask, p: Omit<TaskPatch, "updatedAt">): void {
    this.patchRow(t.id, { ...p, updatedAt: t.updatedAt });
  }

  // An unwritten task's changes are in its live state, which its row is made from.
  private patchRow(taskId: string, p: TaskPatch): void {
    if (!this.unwritten.has(taskId)) this.writer.patch(taskId, p);
  }

  private statusChanged(t: LiveTask, from: TaskStatus | null, to: TaskStatus): void {
    if (!this.onStatus) return;
    try {
      this.onStatus(t, from, to);
    } catch (e) {
      this.log.warn({ err: (e as Error).message, taskId: t.id }, "task status listener failed");
    }
  }

  private record(h: TaskHistoryEntry): void {
    if (!this.unwritten.record(h)) this.writer.history(h);
  }

  /** Queues the whole row of an unwritten task (as it is now) with its history, in one batch. */
  private writeRow(u: Unwritten): void {
    this.writer.insert(recordFromLive(u.task), u.history);
    for (const fn of u.afterCommit) this.writer.afterCommit(fn);
  }

  /** An ended task's copy, written by another coordinator, leaves the index; its watchers hear the result. */
  private closeCopy(t: LiveTask): void {
    this.lostAttempts.delete(t.id);
    this.index.remove(t.id);
    this.emitResult(t);
  }

  private emitResult(t: LiveTask): void {
    this.emit({
      type: "result",
      taskId: t.id,
      status: t.status,
      result: t.result,
      resultJson: t.resultJson,
      error: t.error,
    });
  }

  private announce(t: LiveTask): void {
    if (!isTerminal(t.status)) {
      this.emit({ type: "status", taskId: t.id, status: t.status, attempt: t.attempt });
      return;
    }
    t.endedAt = t.updatedAt;
    this.lostAttempts.delete(t.id);
    const u = this.unwritten.take(t.id);
    if (u) this.writeRow(u);
    else this.writer.patch(t.id, { endedAt: t.endedAt, updatedAt: t.updatedAt });
    this.emitResult(t);
    this.writer.afterCommit(() => {
      this.index.remove(t.id);
      this.onFinished(t);
    });
  }
}

/** When an outcome that folds its start in (no `started` event was sent) started; undefined for any other event. */
function foldedStart(ev: TaskEvent): number | undefined {
  return ev.type !== "started" && typeof ev.startedAt === "number" && ev.startedAt <= ev.at
    ? ev.startedAt
    : undefined;
}

/** The error a retry brings, and the result and error an outcome brings, onto the live task. */
function takeOutcome(t: LiveTask, ev: TaskEvent): void {
  if (ev.type === "retry" && ev.error) t.error = ev.error;
  if (ev.type === "finished") {
    t.result = ev.result ?? null;
    t.resultJson = ev.resultJson ?? null;
    t.error = ev.status === "COMPLETE" ? null : (ev.error ?? t.error);
  }
}
