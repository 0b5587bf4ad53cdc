// Per-workspace limits (docs/limits.md): what operators set, read by the
// container manager (containers, CPU, memory, GPUs) and task submission
// (pending tasks) and the queue stores (queue items). null is no limit.

import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import type { Database } from "../store/index.ts";
import { SYSCALL_FILTERS, type SyscallFilter } from "../../api/index.ts";

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
  /** "gvisor": every container of the workspace runs under gVisor, whatever its stub says; null: the stub's own. */
  isolation: WorkspaceIsolation | null;
  /**
   * false: the workspace's containers run without a user namespace, root
   * inside being the host's root (an operator opted it out); true (the
   * default): root inside is an unprivileged host uid.
   */
  userNamespace: boolean;
  /** "denylist": the older allow-by-default system call profile; "allowlist" (the default): the default-deny one. */
  syscallFilter: SyscallFilter;
  /** GPU-hours (requested GPUs × run time) of the current UTC month; at it, GPU work is refused. */
  gpuHoursPerMonth: number | null;
  /** CPU-hours (requested cores × run time) of the current UTC month; at it, all work is refused. */
  cpuHoursPerMonth: number | null;
  /** Prompt plus completion tokens of /v1 requests in the current UTC month; at it, /v1 requests are refused (429). */
  v1TokensPerMonth: number | null;
  /** GPUs held at once by type ({"A100": 2}); a type not named has no limit of its own; null: none by type. */
  maxGpusByType: Record<string, number> | null;
}

/** The isolation an operator may force on a workspace's containers (docs/runtime.md). */
export type WorkspaceIsolation = "gvisor";
export const WORKSPACE_ISOLATIONS: readonly WorkspaceIsolation[] = ["gvisor"];

/** The system call filter of a workspace's containers (docs/limits.md, "Opting a workspace out"). */
export type { SyscallFilter };
export { SYSCALL_FILTERS };

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
  "gpuHoursPerMonth",
  "cpuHoursPerMonth",
  "v1TokensPerMonth",
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
  gpuHoursPerMonth: null,
  cpuHoursPerMonth: null,
  v1TokensPerMonth: null,
  isolation: null,
  userNamespace: true,
  syscallFilter: "allowlist",
  maxGpusByType: null,
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
  gpuHoursPerMonth: "gpu_hours_per_month",
  cpuHoursPerMonth: "cpu_hours_per_month",
  v1TokensPerMonth: "v1_tokens_per_month",
} as const satisfies Record<(typeof LIMIT_NAMES)[number], string>;

/** A GPU type as a per-type limit names it: what `gpu=` names (letters, digits, - _ . and a MIG profile after ":"). */
const GPU_TYPE_KEY = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_.+-]{1,32})?$/;

/** Most GPU types one workspace's per-type limits name. */
export const MAX_GPU_TYPE_LIMITS = 64;

const gpusByTypeOf = (v: unknown): Record<string, number> | null => {
  if (typeof v !== "string") return null;
  try {
    const parsed = JSON.parse(v) as Record<string, number>;
    return parsed && typeof parsed === "object" && Object.keys(parsed).length > 0 ? parsed : null;
  } catch {
    return null;
  }
};

/** Refuses a per-type limit that is not {"TYPE": whole number}; an empty object reads as none. */
function checkGpusByType(v: Record<string, number>): void {
  const entries = Object.entries(v);
  if (entries.length > MAX_GPU_TYPE_LIMITS)
    throw new BerthError(
      "invalid_request",
      `max_gpus_by_type names ${entries.length} GPU types; at most ${MAX_GPU_TYPE_LIMITS}`,
    );
  const seen = new Set<string>();
  for (const [type, n] of entries) {
    if (!GPU_TYPE_KEY.test(type))
      throw new BerthError(
        "invalid_request",
        `max_gpus_by_type: ${JSON.stringify(type)} is not a GPU type (letters, digits, "-", "_", ".", and a MIG profile after ":", as gpu= names them)`,
      );
    if (seen.has(type.toUpperCase()))
      throw new BerthError(
        "invalid_request",
        `max_gpus_by_type names ${type} twice (types match without regard to case)`,
      );
    seen.add(type.toUpperCase());
    if (!Number.isInteger(n) || n < 0 || n > MAX_LIMIT_VALUE)
      throw new BerthError(
        "invalid_request",
        `max_gpus_by_type ${type} must be a whole number from 0 to ${MAX_LIMIT_VALUE}; got ${JSON.stringify(n)}`,
      );
  }
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const isolationOf = (v: unknown): WorkspaceIsolation | null =>
  WORKSPACE_ISOLATIONS.includes(v as WorkspaceIsolation) ? (v as WorkspaceIsolation) : null;
// Only an explicit 0 opts out: a row from before migration 0030 (null) keeps the default.
const userNamespaceOf = (v: unknown): boolean => v === null || v === undefined || Number(v) !== 0;
const syscallFilterOf = (v: unknown): SyscallFilter => (v === "denylist" ? "denylist" : "allowlist");

/** Refuses a user namespace or system call filter choice that is not one of the allowed values. */
export function checkOptOuts(change: Partial<WorkspaceLimits>): void {
  if (change.userNamespace !== undefined && typeof change.userNamespace !== "boolean")
    throw new BerthError(
      "invalid_request",
      `user_namespace must be true or false; got ${JSON.stringify(change.userNamespace)}`,
    );
  const filter = change.syscallFilter;
  if (filter !== undefined && !SYSCALL_FILTERS.includes(filter))
    throw new BerthError(
      "invalid_request",
      `syscall_filter must be ${SYSCALL_FILTERS.map((f) => JSON.stringify(f)).join(" or ")}; got ${JSON.stringify(filter)}`,
    );
}

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
        "workspace_limits.isolation",
        "workspace_limits.user_namespace",
        "workspace_limits.syscall_filter",
        "workspace_limits.max_gpus_by_type",
        "workspace_limits.gpu_hours_per_month",
        "workspace_limits.cpu_hours_per_month",
        "workspace_limits.v1_tokens_per_month",
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
      gpuHoursPerMonth: num(r.gpu_hours_per_month),
      cpuHoursPerMonth: num(r.cpu_hours_per_month),
      v1TokensPerMonth: num(r.v1_tokens_per_month),
      isolation: isolationOf(r.isolation),
      userNamespace: userNamespaceOf(r.user_namespace),
      syscallFilter: syscallFilterOf(r.syscall_filter),
      maxGpusByType: gpusByTypeOf(r.max_gpus_by_type),
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
    const iso = change.isolation;
    if (iso !== undefined && iso !== null && !WORKSPACE_ISOLATIONS.includes(iso))
      throw new BerthError(
        "invalid_request",
        `isolation must be ${WORKSPACE_ISOLATIONS.map((i) => JSON.stringify(i)).join(" or ")}, or null for each stub's own; got ${JSON.stringify(iso)}`,
      );
    checkOptOuts(change);
    const byType = change.maxGpusByType;
    if (byType !== undefined && byType !== null) checkGpusByType(byType);
    return this.db.transaction().execute(async (tx) => {
      const repo = new LimitsRepo(tx);
      const next = { ...(await repo.get(workspaceId)) };
      for (const name of LIMIT_NAMES)
        if (change[name] !== undefined) next[name] = change[name] as number | null;
      if (iso !== undefined) next.isolation = iso;
      if (change.userNamespace !== undefined) next.userNamespace = change.userNamespace;
      if (change.syscallFilter !== undefined) next.syscallFilter = change.syscallFilter;
      if (byType !== undefined)
        next.maxGpusByType = byType && Object.keys(byType).length > 0 ? { ...byType } : null;
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
        gpu_hours_per_month: next.gpuHoursPerMonth,
        cpu_hours_per_month: next.cpuHoursPerMonth,
        v1_tokens_per_month: next.v1TokensPerMonth,
        isolation: next.isolation,
        user_namespace: next.userNamespace ? 1 : 0,
        syscall_filter: next.syscallFilter,
        max_gpus_by_type: next.maxGpusByType ? JSON.stringify(next.maxGpusByType) : null,
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
