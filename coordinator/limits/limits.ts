// Workspace limits at run time (docs/limits.md): a short-lived cache of what
// operators set, so the container manager and task submission do not read
// the store on every call, and the pending-tasks check submission makes.

import { BerthError } from "../../shared/errors.ts";
import type { WorkspaceLimits } from "./store.ts";

/** How long limits are cached: a change made on another coordinator applies within this. */
export const LIMITS_CACHE_MS = 5000;

export interface WorkspaceLimitsCacheOptions {
  repo: { get(workspaceId: string): Promise<WorkspaceLimits> };
  /** @default LIMITS_CACHE_MS */
  ttlMs?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

export class WorkspaceLimitsCache {
  private readonly byWorkspace = new Map<string, { limits: Promise<WorkspaceLimits>; at: number }>();
  private readonly ttlMs: number;
  private readonly clock: () => number;

  constructor(private readonly o: WorkspaceLimitsCacheOptions) {
    this.ttlMs = o.ttlMs ?? LIMITS_CACHE_MS;
    this.clock = o.clock ?? Date.now;
  }

  /** The workspace's limits (concurrent first reads share one store read). */
  get(workspaceId: string): Promise<WorkspaceLimits> {
    const now = this.clock();
    const hit = this.byWorkspace.get(workspaceId);
    if (hit && now - hit.at < this.ttlMs) return hit.limits;
    const limits = this.o.repo.get(workspaceId);
    this.byWorkspace.set(workspaceId, { limits, at: now });
    // A failed read is not remembered.
    limits.catch(() => {
      if (this.byWorkspace.get(workspaceId)?.limits === limits) this.byWorkspace.delete(workspaceId);
    });
    return limits;
  }

  async maxPendingTasks(workspaceId: string): Promise<number | null> {
    return (await this.get(workspaceId)).maxPendingTasks;
  }

  /** The next read goes to the store (after this coordinator changed them). */
  invalidate(workspaceId: string): void {
    this.byWorkspace.delete(workspaceId);
  }
}

/**
 * Refuses adding `adding` tasks to a workspace with `pending` waiting when
 * that passes max_pending_tasks (null: no limit): limit_exceeded, naming the
 * limit and the numbers.
 */
export function checkPendingTasks(max: number | null, pending: number, adding: number): void {
  if (max === null || pending + adding <= max) return;
  throw new BerthError(
    "limit_exceeded",
    `the workspace has ${pending} pending tasks and its limit max_pending_tasks is ${max}: ${adding === 1 ? "this task" : `these ${adding} tasks`} cannot be queued until some of them start or end`,
    { limit: "max_pending_tasks", max_pending_tasks: max, pending_tasks: pending, requested: adding },
  );
}
