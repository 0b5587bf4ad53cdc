// The coordinator's in-memory view of every unfinished task, so the event
// path never reads the store: status and attempt per task, demand per stub
// (the container manager's input) and what each container is doing.

import type { TaskStatus } from "../../shared/tasks.ts";
import type { NewTask, TaskRecord } from "./store.ts";
import type { StubDemand } from "./activity.ts";

/** A task row as the live index holds it: the result stays base64, as the event carried it. */
export interface LiveTask extends Omit<TaskRecord, "result"> {
  /** base64 pickle. */
  result: string | null;
}

export function liveFromRecord(r: TaskRecord): LiveTask {
  return {
    id: r.id,
    workspaceId: r.workspaceId,
    stubId: r.stubId,
    status: r.status,
    attempt: r.attempt,
    containerId: r.containerId,
    agentId: r.agentId,
    streamSeq: r.streamSeq,
    headless: r.headless,
    callbackUrl: r.callbackUrl,
    expiresAt: r.expiresAt,
    createdAt: r.createdAt,
    startedAt: r.startedAt,
    endedAt: r.endedAt,
    updatedAt: r.updatedAt,
    tokenId: r.tokenId,
    error: r.error,
    result: r.result ? r.result.toString("base64") : null,
    resultJson: r.resultJson,
  };
}

/** The task's whole row as the live index has it (every column is kept there). */
export function recordFromLive(t: LiveTask): TaskRecord {
  return { ...t, result: t.result ? Buffer.from(t.result, "base64") : null };
}

/**
 * A task just created, before its message is published. Built field by field
 * in liveFromRecord's order, not by spreading newTaskRecord: every live task
 * then has one shape, and this is on each endpoint request's path (the two
 * spreads were ~5% of its CPU: bench/README.md, "endpoint", 2026-11-26 16:20).
 */
export function pendingTask(n: NewTask): LiveTask {
  return {
    id: n.id,
    workspaceId: n.workspaceId,
    stubId: n.stubId,
    status: "PENDING",
    attempt: 0,
    containerId: null,
    agentId: null,
    streamSeq: null,
    headless: n.headless,
    callbackUrl: n.callbackUrl,
    expiresAt: n.expiresAt,
    createdAt: n.createdAt,
    startedAt: null,
    endedAt: null,
    updatedAt: n.createdAt,
    tokenId: n.tokenId ?? null,
    error: null,
    result: null,
    resultJson: null,
  };
}

interface ContainerState {
  running: number;
  lastActiveAt: number;
}

const waiting = (s: TaskStatus) => s === "PENDING" || s === "RETRY";

export class LiveIndex {
  private readonly tasks = new Map<string, LiveTask>();
  private readonly demand = new Map<string, StubDemand>();
  private readonly containers = new Map<string, ContainerState>();
  private readonly listeners = new Set<(stubId: string) => void>();

  get size(): number {
    return this.tasks.size;
  }

  get(id: string): LiveTask | undefined {
    return this.tasks.get(id);
  }

  values(): IterableIterator<LiveTask> {
    return this.tasks.values();
  }

  /** Tracks a task; `quiet` leaves the demand notification to the caller (one per batch). */
  add(t: LiveTask, quiet = false): void {
    this.tasks.set(t.id, t);
    this.count(t, t.status, +1);
    if (t.status === "RUNNING" && t.containerId) this.containerDelta(t.containerId, +1, Date.now());
    if (!quiet) this.notify(t.stubId);
  }

  /** Moves a task to `status`, keeping the stub's demand and the container's activity in step. */
  setStatus(t: LiveTask, status: TaskStatus, containerId: string | null, at: number): void {
    if (t.status === "RUNNING" && t.containerId) this.containerDelta(t.containerId, -1, at);
    this.count(t, t.status, -1);
    t.status = status;
    t.containerId = containerId ?? t.containerId;
    this.count(t, status, +1);
    if (status === "RUNNING" && t.containerId) this.containerDelta(t.containerId, +1, at);
    this.notify(t.stubId);
  }

  /** Forgets a finished task once its final row is committed. */
  remove(id: string): void {
    const t = this.tasks.get(id);
    if (!t) return;
    this.tasks.delete(id);
    this.count(t, t.status, -1);
  }

  demandList(): StubDemand[] {
    return [...this.demand.values()].map((d) => ({ ...d }));
  }

  demandOf(stubId: string): StubDemand | undefined {
    const d = this.demand.get(stubId);
    return d && { ...d };
  }

  containerActivity(containerId: string): { busy: boolean; lastActiveAt: number } | undefined {
    const c = this.containers.get(containerId);
    return c && { busy: c.running > 0, lastActiveAt: c.lastActiveAt };
  }

  /** Drops containers idle since before `before` (ms); they were stopped long ago or will be asked about again. */
  pruneContainers(before: number): void {
    for (const [id, c] of this.containers)
      if (c.running === 0 && c.lastActiveAt < before) this.containers.delete(id);
  }

  onDemandChange(listener: (stubId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  notify(stubId: string): void {
    for (const l of this.listeners) {
      try {
        l(stubId);
      } catch {
        // A listener's failure is its own; the task path goes on.
      }
    }
  }

  private count(t: LiveTask, status: TaskStatus, delta: number): void {
    const isWaiting = waiting(status);
    if (!isWaiting && status !== "RUNNING") return;
    let d = this.demand.get(t.stubId);
    if (!d) {
      d = { stubId: t.stubId, workspaceId: t.workspaceId, pending: 0, running: 0 };
      this.demand.set(t.stubId, d);
    }
    if (isWaiting) d.pending += delta;
    else d.running += delta;
    if (d.pending <= 0 && d.running <= 0) this.demand.delete(t.stubId);
  }

  private containerDelta(containerId: string, delta: number, at: number): void {
    const c = this.containers.get(containerId) ?? { running: 0, lastActiveAt: at };
    c.running = Math.max(0, c.running + delta);
    c.lastActiveAt = at;
    this.containers.set(containerId, c);
  }
}
