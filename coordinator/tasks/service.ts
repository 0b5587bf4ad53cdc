// Tasks on the coordinator: stubs, submission (rows + JetStream messages),
// the task event consumer, cancel, expiry and callbacks. Implements the
// TaskActivity the container manager reads.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { BerthError, describeError } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import type { StubConfig, StubExtra, TaskError } from "../../shared/tasks.ts";
import type { Objects } from "../objects/index.ts";
import type { StubRepo } from "./stub-store.ts";
import type { TaskRepo } from "./store.ts";
import type { WorkspaceRepo } from "../store/index.ts";
import type { StubRecord } from "./stub-store.ts";
import type { TaskHistoryEntry, TaskRecord } from "./store.ts";
import type { ContainerCounts, StubDemand, TaskActivity } from "./activity.ts";
import { PendingAdmissions } from "./admissions.ts";
import type { BatchWriterOptions } from "./batch-writer.ts";
import { buildCallback, CallbackSender } from "./callbacks.ts";
import { DirectTasks } from "./direct.ts";
import { DirectOrphanCheck } from "./direct-orphans.ts";
import { DirectOwners } from "./direct-owners.ts";
import { TaskEngine, type TaskListener, type TaskStatusListener, type TaskUpdate } from "./engine.ts";
import { TaskCatchUp, type TaskCatchUpOptions } from "./catch-up.ts";
import { TaskEventConsumer } from "./event-consumer.ts";
import { type LiveTask, liveFromRecord, pendingTask, recordFromLive } from "./live-index.ts";
import { requestedResources } from "./cost.ts";
import { checkInputs, policyExpiresAt } from "./policy.ts";
import { TaskQueue } from "./task-queue.ts";
import { isTerminal } from "./transitions.ts";
import { type AgentStates, LOST_TASK_AFTER_MS, retryTasksOfLostAgents } from "./lost-agents.ts";
import { type TaskWaiting, taskWaiting } from "./waiting.ts";

export type { TaskListener, TaskUpdate };

export interface TaskServiceDeps {
  /** The records the task service reads and writes. */
  store: { tasks: TaskRepo; stubs: StubRepo; workspaces: WorkspaceRepo };
  nats: NatsConnection;
  objects: Objects;
  /** The container manager (stats.active_containers); may be set later with useContainerCounts. */
  counts?: ContainerCounts;
  log: Logger;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
  /** @default 1000 */
  sweepIntervalMs?: number;
  /** The fleet's agent states (FleetView): RUNNING tasks of a lost agent go to RETRY (lost-agents.ts). @default none */
  agents?: AgentStates;
  /** How long past its last heartbeat a lost agent's RUNNING tasks wait before RETRY. @default LOST_TASK_AFTER_MS */
  lostTaskAfterMs?: number;
  writer?: BatchWriterOptions;
  /** How long a direct task stays unwritten at most (ms). @default FOLD_MS (coordinator/tasks/unwritten.ts) */
  directFoldMs?: number;
  /** Hears every task status change (workspace events: coordinator/events taskEvents). */
  onTaskStatus?: TaskStatusListener;
  /** The workspace's max_pending_tasks (docs/limits.md; WorkspaceLimitsCache). @default no limit */
  limits?: { maxPendingTasks(workspaceId: string): Promise<number | null> };
  /** The workspace's GPU-hours and CPU-hours of the month (docs/limits.md; ComputeBudgets): refuses work past one. @default none */
  budgets?: { check(workspaceId: string, work: { gpus: boolean }): Promise<void> };
  /** The survivors' check for a dead coordinator's direct tasks (direct-orphans.ts): interval, grace, answer wait (ms). */
  directOrphans?: { intervalMs?: number; graceMs?: number; answerWaitMs?: number };
  /** Reading the rows of open tasks for ends whose relay was missed (catch-up.ts). */
  catchUp?: TaskCatchUpOptions;
}

export interface SubmitOptions {
  /** Default: the stub's extra.headless. */
  headless?: boolean;
  callbackUrl?: string | null;
  /** ms since epoch; default: the stub's task_policy.expires. */
  expiresAt?: number | null;
  /** "json": each input is a JSON object for the handler's parameters (TaskHeaders.payloadFormat). */
  payloadFormat?: "json";
  /** Called with the ids once the rows exist, before any message is published (register watchers here). */
  onCreated?: (taskIds: string[]) => void;
  /** The API token whose request submits the tasks (usage per member, docs/usage.md). @default none */
  tokenId?: string | null;
}

export interface StubSpec {
  name: string;
  type: string;
  config: StubConfig;
  extra: StubExtra;
}

const taskError = (type: string, message: string): TaskError => ({ type, message, traceback: "" });

export class TaskService implements TaskActivity {
  private readonly store: TaskServiceDeps["store"];
  private readonly objects: Objects;
  private counts: ContainerCounts | undefined;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly engine: TaskEngine;
  private readonly callbacks: CallbackSender;
  private readonly stubs = new Map<string, StubRecord>();
  private readonly stubListeners: ((stubId: string) => void)[] = [];
  private readonly signatureTokens = new Map<string, string>();
  private readonly sweepIntervalMs: number;
  private readonly agents: AgentStates | undefined;
  private readonly lostTaskAfterMs: number;
  private readonly queue: TaskQueue;
  private readonly events: TaskEventConsumer;
  /** Ends committed by another coordinator whose relay this one missed (catch-up.ts). */
  readonly catchUp: TaskCatchUp;
  private sweeper: NodeJS.Timeout | undefined;
  private readonly limits: TaskServiceDeps["limits"];
  private readonly budgets: TaskServiceDeps["budgets"];
  private readonly admissions = new PendingAdmissions();
  /** Requests the coordinator proxies itself (endpoint, asgi, realtime): tasks without a queue. */
  readonly direct: DirectTasks;
  private readonly directOwners: DirectOwners;
  /** The survivors' check for a dead coordinator's direct tasks (direct-orphans.ts). */
  readonly directOrphans: DirectOrphanCheck;

  constructor(d: TaskServiceDeps) {
    this.store = d.store;
    this.objects = d.objects;
    this.counts = d.counts;
    this.log = d.log;
    this.clock = d.clock ?? Date.now;
    this.sweepIntervalMs = d.sweepIntervalMs ?? 1000;
    this.agents = d.agents;
    this.lostTaskAfterMs = d.lostTaskAfterMs ?? LOST_TASK_AFTER_MS;
    this.limits = d.limits;
    this.budgets = d.budgets;
    this.callbacks = new CallbackSender(d.log);
    this.queue = new TaskQueue(d.nats, d.log);
    this.engine = new TaskEngine(
      d.store.tasks,
      d.log,
      (t) => void this.sendCallback(t),
      d.writer,
      d.directFoldMs,
      d.onTaskStatus,
    );
    this.events = new TaskEventConsumer(d.nats, this.engine, d.store.tasks, d.log);
    this.catchUp = new TaskCatchUp(d.nats, this.engine, d.store.tasks, d.log, this.clock, d.catchUp);
    this.direct = new DirectTasks(this.engine, d.log, this.clock);
    this.directOwners = new DirectOwners(d.nats, (id) => this.direct.owns(id), d.log);
    this.directOrphans = new DirectOrphanCheck({
      tasks: d.store.tasks,
      engine: this.engine,
      owners: this.directOwners,
      owns: (id) => this.direct.owns(id),
      relay: (ev) => this.events.relayEvent(ev),
      log: d.log,
      clock: this.clock,
      ...d.directOrphans,
    });
  }

  /** Called with a stub's id when its config, extra or code changed (warm containers of the old one are replaced). */
  onStubChange(fn: (stubId: string) => void): void {
    this.stubListeners.push(fn);
  }

  useContainerCounts(counts: ContainerCounts): void {
    this.counts = counts;
  }

  async start(): Promise<void> {
    const jsm = await this.queue.start();
    for (const r of await this.store.tasks.listLive()) this.engine.index.add(liveFromRecord(r), true);
    this.directOwners.start();
    await this.direct.failOrphans(
      this.engine.index.values(),
      async (id) => (await this.stubById(id))?.type,
      (ids) => this.directOwners.servedElsewhere(ids),
    );
    for (const d of this.engine.index.demandList()) this.engine.index.notify(d.stubId);
    await this.events.start(jsm);
    this.catchUp.start();
    this.directOrphans.start();
    this.sweeper = setInterval(() => this.sweep(), this.sweepIntervalMs);
    this.sweeper.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    this.directOrphans.stop();
    this.directOwners.stop();
    await this.catchUp.stop();
    await this.events.stop();
    await this.engine.stop();
    await this.callbacks.drain();
  }

  // ---- stubs ----

  async upsertStub(
    workspaceId: string,
    s: StubSpec,
  ): Promise<{ stub: StubRecord; created: boolean; changed: boolean }> {
    let objectId: number | null = null;
    if (s.extra.code_sha256) {
      const obj = await this.objects.find(workspaceId, s.extra.code_sha256);
      if (!obj)
        throw new BerthError("not_found", `code object ${s.extra.code_sha256} not found: upload it first`);
      objectId = obj.id;
    }
    const r = await this.store.stubs.upsert(workspaceId, { ...s, objectId });
    this.stubs.set(r.stub.id, r.stub);
    if (r.changed) for (const fn of this.stubListeners) fn(r.stub.id);
    await this.queue.ensureConsumer(r.stub.id);
    return r;
  }

  /** The workspace's stub; not_found for another workspace's. */
  async getStub(workspaceId: string, stubId: string): Promise<StubRecord> {
    const stub = await this.stubById(stubId);
    if (!stub || stub.workspaceId !== workspaceId)
      throw new BerthError("not_found", `stub ${stubId} not found`);
    return stub;
  }

  // ---- tasks ----

  /** Creates one task per input and queues them; returns their ids in input order. */
  async submit(
    workspaceId: string,
    stubId: string,
    inputs: Uint8Array[],
    o: SubmitOptions = {},
  ): Promise<string[]> {
    const stub = await this.getStub(workspaceId, stubId);
    checkInputs(inputs);
    await this.budgets?.check(workspaceId, { gpus: requestedResources(stub).gpuCount > 0 });
    const max = this.limits ? await this.limits.maxPendingTasks(workspaceId) : null;
    const admitted = this.admissions.reserve(workspaceId, max, this.pendingTasks(workspaceId), inputs.length);
    try {
      return await this.submitAdmitted(workspaceId, stub, inputs, o, admitted);
    } finally {
      admitted();
    }
  }

  /** Tasks of the workspace waiting for a runner (PENDING or RETRY), as this coordinator tracks them. */
  pendingTasks(workspaceId: string): number {
    let n = 0;
    for (const d of this.engine.index.demandList()) if (d.workspaceId === workspaceId) n += d.pending;
    return n;
  }

  private async submitAdmitted(
    workspaceId: string,
    stub: StubRecord,
    inputs: Uint8Array[],
    o: SubmitOptions,
    admitted: () => void,
  ): Promise<string[]> {
    const stubId = stub.id;
    await this.queue.ensureConsumer(stubId);
    const now = this.clock();
    const createdAt = new Date(now).toISOString();
    const expiresAt = o.expiresAt !== undefined ? o.expiresAt : policyExpiresAt(stub.config, now);
    const headless = o.headless ?? stub.extra.headless;
    const callbackUrl = o.callbackUrl || null;
    const tokenId = o.tokenId ?? null;
    const rows = inputs.map(() => ({
      id: newId("task"),
      workspaceId,
      stubId,
      headless,
      callbackUrl,
      expiresAt,
      createdAt,
      tokenId,
    }));
    const ids = rows.map((r) => r.id);
    await this.store.tasks.insertMany(rows);
    const live = rows.map((r) => {
      const t = pendingTask(r);
      this.engine.index.add(t, true);
      this.engine.created(t);
      return t;
    });
    admitted();
    this.engine.index.notify(stubId);
    o.onCreated?.(ids);
    this.events.announceCreated(live);
    const fields = { workspaceId, createdAt: now, expiresAt, callbackUrl, payloadFormat: o.payloadFormat };
    await this.queue.publish(stub, live, inputs, fields, {
      published: (t, seq) => this.onPublished(t, seq),
      failed: (t, e) => this.onPublishFailed(t, e),
    });
    return ids;
  }

  watch(taskIds: Iterable<string>, listener: TaskListener): () => void {
    return this.engine.watch(taskIds, listener);
  }

  /**
   * The task: from the live index while this coordinator tracks it (it holds
   * every column, also of a task whose row is not written yet), else the store's row.
   */
  async getTask(workspaceId: string, taskId: string): Promise<TaskRecord> {
    const t = this.engine.index.get(taskId);
    const row = t ? recordFromLive(t) : await this.store.tasks.get(taskId);
    if (!row || row.workspaceId !== workspaceId)
      throw new BerthError("not_found", `task ${taskId} not found`);
    return row;
  }

  /** The task's status history (committed entries, or all of them for a task whose row is not written yet). */
  async history(workspaceId: string, taskId: string): Promise<TaskHistoryEntry[]> {
    await this.getTask(workspaceId, taskId);
    const unwritten = this.engine.unwrittenHistory(taskId);
    if (unwritten) return unwritten;
    await this.engine.writer.committed();
    return this.store.tasks.history(taskId);
  }

  /** Waits up to `timeoutMs` for the task to end; answers its state either way. */
  async waitResult(workspaceId: string, taskId: string, timeoutMs: number): Promise<TaskRecord> {
    let wake!: () => void;
    const ended = new Promise<void>((r) => {
      wake = r;
    });
    const unwatch = this.engine.watch([taskId], (u) => {
      if (u.type === "result") wake();
    });
    try {
      const first = await this.getTask(workspaceId, taskId);
      if (isTerminal(first.status)) return first;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([ended, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
      clearTimeout(timer);
      return await this.getTask(workspaceId, taskId);
    } finally {
      unwatch();
    }
  }

  /** Cancels a task not yet ended; an ended task keeps its status. */
  async cancel(
    workspaceId: string,
    taskId: string,
  ): Promise<{ taskId: string; status: TaskRecord["status"] }> {
    const t = await this.liveTask(workspaceId, taskId);
    if (!t) return { taskId, status: (await this.getTask(workspaceId, taskId)).status };
    this.endAndWithdraw(t, "CANCELLED", taskError("TaskCancelled", "the task was cancelled"), "cancelled");
    await this.engine.writer.committed();
    return { taskId, status: t.status };
  }

  /** Cancels the listed tasks that are unfinished and not headless (their caller went away). */
  cancelAbandoned(taskIds: Iterable<string>): number {
    let n = 0;
    for (const id of taskIds) {
      const t = this.engine.index.get(id);
      if (!t || t.headless || isTerminal(t.status)) continue;
      if (
        this.endAndWithdraw(
          t,
          "CANCELLED",
          taskError("TaskCancelled", "the caller disconnected"),
          "client_disconnected",
        )
      )
        n++;
    }
    return n;
  }

  // ---- TaskActivity ----

  demand(): StubDemand[] {
    return this.engine.index.demandList();
  }

  demandOf(stubId: string): StubDemand | undefined {
    return this.engine.index.demandOf(stubId);
  }

  containerActivity(containerId: string): { busy: boolean; lastActiveAt: number } | undefined {
    return this.engine.index.containerActivity(containerId);
  }

  onDemandChange(listener: (stubId: string) => void): () => void {
    return this.engine.index.onDemandChange(listener);
  }

  async failPending(stubId: string, error: { code: string; message: string }): Promise<number> {
    let n = 0;
    for (const t of [...this.engine.index.values()]) {
      if (t.stubId !== stubId || (t.status !== "PENDING" && t.status !== "RETRY")) continue;
      if (this.engine.end(t, "FAILED", { error: taskError(error.code, error.message), reason: error.code })) {
        this.queue.deleteMessage(t.streamSeq);
        n++;
      }
    }
    await this.engine.writer.committed();
    return n;
  }

  requeuePreempted(containerId: string, message: string): number {
    let n = 0;
    const at = Date.now();
    for (const t of [...this.engine.index.values()]) {
      if (t.containerId !== containerId || t.status !== "RUNNING") continue;
      // As for a lost agent: the queue message is redelivered, and the attempt counts as a retry.
      const error = { type: "Preempted", message, traceback: "" };
      if (this.engine.presumeLost(t, { error, reason: "preempted", at })) n++;
    }
    return n;
  }

  /** Tasks of the stub waiting for a runner (stats.queue_depth). */
  queueDepth(stubId: string): number {
    return this.engine.index.demandOf(stubId)?.pending ?? 0;
  }

  activeContainers(stubId: string): number {
    return this.counts?.activeContainers(stubId) ?? 0;
  }

  /** Why the task waits (its place in its stub's queue, what holds containers back); undefined once not waiting. */
  waiting(t: TaskRecord): TaskWaiting | undefined {
    return taskWaiting(this.engine.index.get(t.id) ?? t, this.engine.index.values(), this.counts);
  }

  /** The workspace's callback signature token (made on first need). */
  async signatureToken(workspaceId: string): Promise<string> {
    let token = this.signatureTokens.get(workspaceId);
    if (!token) {
      token = await this.store.workspaces.signatureToken(workspaceId);
      this.signatureTokens.set(workspaceId, token);
    }
    return token;
  }

  // ---- internals ----

  /** The unfinished task (loading it when this coordinator did not know it), or undefined once ended. */
  private async liveTask(workspaceId: string, taskId: string): Promise<LiveTask | undefined> {
    let t = this.engine.index.get(taskId);
    if (!t) {
      const row = await this.store.tasks.get(taskId);
      if (!row || row.workspaceId !== workspaceId)
        throw new BerthError("not_found", `task ${taskId} not found`);
      if (isTerminal(row.status)) return undefined;
      t = this.engine.index.get(taskId) ?? liveFromRecord(row);
      if (!this.engine.index.get(taskId)) this.engine.index.add(t);
    }
    if (t.workspaceId !== workspaceId) throw new BerthError("not_found", `task ${taskId} not found`);
    return isTerminal(t.status) ? undefined : t;
  }

  /** Ends a task here and takes it back from the queue and from any agent running it. */
  private endAndWithdraw(
    t: LiveTask,
    status: "CANCELLED" | "EXPIRED",
    error: TaskError,
    reason: string,
  ): boolean {
    if (!this.engine.end(t, status, { error, reason, at: this.clock() })) return false;
    this.queue.deleteMessage(t.streamSeq);
    this.queue.publishCancel(t.id, status);
    return true;
  }

  private onPublished(t: LiveTask, seq: number): void {
    t.streamSeq = seq;
    if (isTerminal(t.status)) {
      // Cancelled or expired before its message was even stored.
      if (t.status === "CANCELLED" || t.status === "EXPIRED") this.queue.deleteMessage(seq);
      return;
    }
    this.engine.patch(t, { streamSeq: seq });
  }

  private onPublishFailed(t: LiveTask, e: unknown): void {
    const cause = describeError(e);
    this.log.error({ taskId: t.id, err: cause }, "publishing a task failed");
    this.engine.end(t, "FAILED", {
      error: taskError("TaskQueueError", `the task could not be queued: ${cause}`),
      reason: "publish_failed",
    });
  }

  private sweep(): void {
    const now = this.clock();
    for (const t of [...this.engine.index.values()]) {
      // A direct task's expiry is its request's to decide (it answers the caller 503).
      const waiting = (t.status === "PENDING" || t.status === "RETRY") && !this.direct.owns(t.id);
      if (waiting && t.expiresAt !== null && t.expiresAt <= now) {
        const when = new Date(t.expiresAt).toISOString();
        this.endAndWithdraw(
          t,
          "EXPIRED",
          taskError("TaskExpired", `no runner took the task before it expired at ${when}`),
          "expired",
        );
      }
    }
    if (this.agents) retryTasksOfLostAgents(this.engine, this.agents, now, this.lostTaskAfterMs, this.log);
    this.engine.index.pruneContainers(now - 3_600_000);
  }

  private async sendCallback(t: LiveTask): Promise<void> {
    try {
      const stub = t.callbackUrl ? undefined : await this.stubById(t.stubId);
      const url = t.callbackUrl || stub?.config.callback_url;
      if (!url) return;
      const req = buildCallback(url, t, await this.signatureToken(t.workspaceId));
      this.callbacks.send(req, t.id);
    } catch (e) {
      this.log.warn({ taskId: t.id, err: describeError(e) }, "could not prepare the task callback");
    }
  }

  private async stubById(stubId: string): Promise<StubRecord | undefined> {
    let stub = this.stubs.get(stubId);
    if (!stub) {
      stub = await this.store.stubs.get(stubId);
      if (stub) this.stubs.set(stubId, stub);
    }
    return stub;
  }
}
