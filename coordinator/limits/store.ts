// Per-workspace limits (docs/limits.md): what operators set, read by the
// container manager (containers, CPU, memory, GPUs) and task submission
// (pending tasks) and the queue stores (queue items). null is no limit.

import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import type { Database } from "../store/index.ts";

export interface WorkspaceLimits {
  maxContainers: number | null;
  maxCpuMillicores: number | null;
  maxMemoryMb: number | null;
  maxGpus: number | null;
  maxPendingTasks: number | null;
  /** All items of all the workspace's Queues (docs/queues.md). */
  maxQueueItems: number | null;
  /** MiB of all the workspace's volumes (docs/volumes.md). */
  maxVolumeMb: number | null;
  /** /v1 requests of the workspace in flight at once (docs/inference.md). */
  maxInferenceRequests: number | null;
  /** Prompt plus completion tokens of /v1 requests in the last 60 s (docs/inference.md). */
  maxTokensPerMinute: number | null;
}

export const LIMIT_NAMES = [
  "maxContainers",
  "maxCpuMillicores",
  "maxMemoryMb",
  "maxGpus",
  "maxPendingTasks",
  "maxQueueItems",
  "maxVolumeMb",
  "maxInferenceRequests",
  "maxTokensPerMinute",
] as const satisfies readonly (keyof WorkspaceLimits)[];

/** No limit on anything. */
export const UNLIMITED: WorkspaceLimits = {
  maxContainers: null,
  maxCpuMillicores: null,
  maxMemoryMb: null,
  maxGpus: null,
  maxPendingTasks: null,
  maxQueueItems: null,
  maxVolumeMb: null,
  maxInferenceRequests: null,
  maxTokensPerMinute: null,
};

/** Largest value a limit takes (a 32-bit column on both engines). */
export const MAX_LIMIT_VALUE = 2_147_483_647;

const COLUMNS = {
  maxContainers: "max_containers",
  maxCpuMillicores: "max_cpu_millicores",
  maxMemoryMb: "max_memory_mb",
  maxGpus: "max_gpus",
  maxPendingTasks: "max_pending_tasks",
  maxQueueItems: "max_queue_items",
  maxVolumeMb: "max_volume_mb",
  maxInferenceRequests: "max_inference_requests",
  maxTokensPerMinute: "max_tokens_per_minute",
} as const satisfies Record<keyof WorkspaceLimits, string>;

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export class LimitsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** The workspace's limits; not_found for an unknown workspace. */
  async get(workspaceId: string): Promise<WorkspaceLimits> {
    const r = await this.db
      .selectFrom("workspaces")
      .leftJoin("workspace_limits", "workspace_limits.workspace_id", "workspaces.id")
      .select([
        "workspaces.max_containers as ws_max_containers",
        "workspace_limits.workspace_id as limits_row",
        "workspace_limits.max_containers",
        "workspace_limits.max_cpu_millicores",
        "workspace_limits.max_memory_mb",
        "workspace_limits.max_gpus",
        "workspace_limits.max_pending_tasks",
        "workspace_limits.max_queue_items",
        "workspace_limits.max_volume_mb",
        "workspace_limits.max_inference_requests",
        "workspace_limits.max_tokens_per_minute",
      ])
      .where("workspaces.id", "=", workspaceId)
      .executeTakeFirst();
    if (!r) throw new BerthError("not_found", `workspace ${workspaceId} not found`);
    // No row yet: the workspace's own max_containers column (default 32), nothing else limited.
    if (r.limits_row === null) return { ...UNLIMITED, maxContainers: num(r.ws_max_containers) };
    return {
      maxContainers: num(r.max_containers),
      maxCpuMillicores: num(r.max_cpu_millicores),
      maxMemoryMb: num(r.max_memory_mb),
      maxGpus: num(r.max_gpus),
      maxPendingTasks: num(r.max_pending_tasks),
      maxQueueItems: num(r.max_queue_items),
      maxVolumeMb: num(r.max_volume_mb),
      maxInferenceRequests: num(r.max_inference_requests),
      maxTokensPerMinute: num(r.max_tokens_per_minute),
    };
  }

  /**
   * Changes the limits named in `change` (null: no limit); the others keep
   * their values. Returns the limits now in force.
   */
  async set(workspaceId: string, change: Partial<WorkspaceLimits>): Promise<WorkspaceLimits> {
    for (const name of LIMIT_NAMES) {
      const v = change[name];
      if (v !== undefined && v !== null && (!Number.isInteger(v) || v < 0 || v > MAX_LIMIT_VALUE))
        throw new BerthError(
          "invalid_request",
          `${COLUMNS[name]} must be a whole number from 0 to ${MAX_LIMIT_VALUE}, or null for no limit; got ${v}`,
        );
    }
    return this.db.transaction().execute(async (tx) => {
      const repo = new LimitsRepo(tx);
      const next = { ...(await repo.get(workspaceId)) };
      for (const name of LIMIT_NAMES)
        if (change[name] !== undefined) next[name] = change[name] as number | null;
      const row = {
        max_containers: next.maxContainers,
        max_cpu_millicores: next.maxCpuMillicores,
        max_memory_mb: next.maxMemoryMb,
        max_gpus: next.maxGpus,
        max_pending_tasks: next.maxPendingTasks,
        max_queue_items: next.maxQueueItems,
        max_volume_mb: next.maxVolumeMb,
        max_inference_requests: next.maxInferenceRequests,
        max_tokens_per_minute: next.maxTokensPerMinute,
        updated_at: new Date().toISOString(),
      };
      await tx
        .insertInto("workspace_limits")
        .values({ workspace_id: workspaceId, ...row })
        .onConflict((oc) => oc.column("workspace_id").doUpdateSet(row))
        .execute();
      // The older column stays true for whoever still reads it (WorkspaceRepo.maxContainers).
      if (next.maxContainers !== null)
        await tx
          .updateTable("workspaces")
          .set({ max_containers: next.maxContainers })
          .where("id", "=", workspaceId)
          .execute();
      return next;
    });
  }
}
