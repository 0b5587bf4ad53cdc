// `/api/v1/workspace/{ws}/limits` (docs/limits.md): the workspace's limits
// and what it uses now. Any token of the workspace reads them; operators
// (admin tokens) read and set them for any workspace. Another workspace's
// ordinary token reads as not found, like every workspace route.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { WorkspaceUsage } from "../scheduler/index.ts";
import {
  MAX_GPU_TYPE_LIMITS,
  MAX_LIMIT_VALUE,
  type LimitsRepo,
  SYSCALL_FILTERS,
  checkOptOuts,
  type SyscallFilter,
  WORKSPACE_ISOLATIONS,
  type WorkspaceIsolation,
  type WorkspaceLimits,
} from "./store.ts";
import type { Workspace, WorkspaceRepo } from "../store/index.ts";
import type { ComputeSeconds } from "./budgets.ts";
import { principalOf } from "../http/index.ts";
import { WorkspaceErrors, WsParams } from "../http/index.ts";

export interface LimitRouteDeps {
  workspaces: Pick<WorkspaceRepo, "byExternalId">;
  limits: Pick<LimitsRepo, "get" | "set">;
  /** What the workspace uses now (ContainerManager.workspaceUsage, TaskService.pendingTasks); a part not given reads 0. */
  usage: {
    containers?(workspaceId: string): WorkspaceUsage;
    pendingTasks?(workspaceId: string): number;
    /** Items in all of the workspace's Queues (QueueStore.items). */
    queueItems?(workspaceId: string): Promise<number>;
    /** Bytes in all of the workspace's volumes (VolumeFiles.workspaceBytes). */
    volumeBytes?(workspaceId: string): Promise<number>;
    /** /v1 requests in flight and tokens of the last minute (InferenceLimiter.usage). */
    inference?(workspaceId: string): { requests: number; tokensLastMinute: number };
    /** Requested GPU and CPU seconds in [fromMs, toMs) (the usage area's tally; budgets read it through ComputeBudgets). */
    computeSeconds?(workspaceId: string, fromMs: number, toMs: number): Promise<ComputeSeconds>;
    /** Prompt plus completion tokens of /v1 requests in [fromMs, toMs) (the usage area's count; the budget reads it through V1TokenBudget). */
    v1Tokens?(workspaceId: string, fromMs: number, toMs: number): Promise<number>;
  };
  /** This month's use, cached (ComputeBudgets.thisMonth). @default none shown */
  thisMonth?(workspaceId: string): Promise<ComputeSeconds | undefined>;
  /** /v1 tokens this month, cached (V1TokenBudget.thisMonth). @default none shown */
  v1TokensThisMonth?(workspaceId: string): Promise<number | undefined>;
  /** After limits changed here: caches forget them (WorkspaceLimitsCache.invalidate, ContainerManager.invalidateLimits). */
  onChange?(workspaceId: string): void;
}

const MiB = 1024 * 1024;
const hours = (seconds: number) => Math.round((seconds / 3600) * 100) / 100;

// One JSON type list, not a union: with type coercion on, Ajv turns a null tried
// against an integer branch into 0, and a 0 tried against a null branch into null.
const Limit = (description: string) =>
  Type.Unsafe<number | null>({
    type: ["integer", "null"],
    minimum: 0,
    maximum: MAX_LIMIT_VALUE,
    description,
  });

const LIMIT_FIELDS = {
  max_containers: Limit("containers running or starting at once"),
  max_cpu_millicores: Limit("CPU reserved by its containers, in millicores (1000 = one core)"),
  max_memory_mb: Limit("memory reserved by its containers, in MiB"),
  max_gpus: Limit("GPUs held by its containers"),
  max_pending_tasks: Limit(
    "tasks waiting for a container; a submission past it is refused (429 limit_exceeded)",
  ),
  max_queue_items: Limit("items in all of its Queues together; a put past it is refused (limit_exceeded)"),
  max_volume_mb: Limit("MiB in all of its volumes together; an upload past it is refused (limit_exceeded)"),
  max_inference_requests: Limit("/v1 inference requests in flight at once; one past it is refused (429)"),
  max_tokens_per_minute: Limit(
    "prompt plus completion tokens of /v1 requests in the last 60 s; a request once it is reached is refused (429)",
  ),
  gpu_hours_per_month: Limit(
    "GPU-hours (requested GPUs × run time) of the current UTC month; once used, work asking for GPUs is refused (limit_exceeded) until the 1st",
  ),
  cpu_hours_per_month: Limit(
    "CPU-hours (requested cores × run time) of the current UTC month; once used, new work is refused (limit_exceeded) until the 1st",
  ),
  v1_tokens_per_month: Limit(
    "prompt plus completion tokens of /v1 requests in the current UTC month; once used, /v1 requests are refused (429 limit_exceeded) until the 1st",
  ),
  isolation: Type.Unsafe<WorkspaceIsolation | null>({
    type: ["string", "null"],
    enum: [...WORKSPACE_ISOLATIONS, null],
    description:
      '"gvisor": every container of the workspace runs under gVisor, whatever its stub asks; null: each stub\'s own isolation=',
  }),
  user_namespace: Type.Boolean({
    description:
      "true (the default): root inside the workspace's containers is an unprivileged host uid; false: an operator opted the workspace out, root inside is the host's root",
  }),
  syscall_filter: Type.Unsafe<SyscallFilter>({
    type: "string",
    enum: [...SYSCALL_FILTERS],
    description:
      '"allowlist" (the default): system calls not on the allow list are refused; "denylist": the older profile, which allows all but a deny list',
  }),
  max_gpus_by_type: Type.Unsafe<Record<string, number> | null>({
    type: ["object", "null"],
    additionalProperties: { type: "integer", minimum: 0, maximum: MAX_LIMIT_VALUE },
    maxProperties: MAX_GPU_TYPE_LIMITS,
    description:
      'GPUs held by its containers at once, by type ({"A100": 2}); a model also counts its MIG slices; a type not named has no limit of its own; null or {}: none by type',
  }),
};

const LimitsBody = Type.Object(LIMIT_FIELDS, { description: "null: no limit" });
const LimitsChange = Type.Partial(Type.Object(LIMIT_FIELDS), {
  additionalProperties: false,
  description: "the limits to change (null: no limit); the others keep their values",
});
const UsageBody = Type.Object({
  containers: Type.Integer(),
  cpu_millicores: Type.Integer(),
  memory_mb: Type.Integer(),
  gpus: Type.Integer(),
  gpus_by_type: Type.Record(Type.String(), Type.Integer(), {
    description: "GPUs held now by the type each container holds",
  }),
  pending_tasks: Type.Integer(),
  queue_items: Type.Integer(),
  volume_mb: Type.Integer(),
  inference_requests: Type.Integer(),
  tokens_last_minute: Type.Integer(),
  gpu_hours_this_month: Type.Number({
    description: "requested GPUs × run time this UTC month, in hours (2 decimals)",
  }),
  cpu_hours_this_month: Type.Number({
    description: "requested cores × run time this UTC month, in hours (2 decimals)",
  }),
  v1_tokens_this_month: Type.Integer({
    description: "prompt plus completion tokens of /v1 requests this UTC month",
  }),
});
const LimitsResponse = Type.Object({ workspace_id: Type.String(), limits: LimitsBody, usage: UsageBody });

type LimitsJson = Record<
  Exclude<keyof typeof LIMIT_FIELDS, "isolation" | "user_namespace" | "syscall_filter" | "max_gpus_by_type">,
  number | null
> & {
  isolation: WorkspaceIsolation | null;
  user_namespace: boolean;
  syscall_filter: SyscallFilter;
  max_gpus_by_type: Record<string, number> | null;
};

const limitsJson = (l: WorkspaceLimits): LimitsJson => ({
  max_containers: l.maxContainers,
  max_cpu_millicores: l.maxCpuMillicores,
  max_memory_mb: l.maxMemoryMb,
  max_gpus: l.maxGpus,
  max_pending_tasks: l.maxPendingTasks,
  max_queue_items: l.maxQueueItems,
  max_volume_mb: l.maxVolumeMb,
  max_inference_requests: l.maxInferenceRequests,
  max_tokens_per_minute: l.maxTokensPerMinute,
  gpu_hours_per_month: l.gpuHoursPerMonth,
  cpu_hours_per_month: l.cpuHoursPerMonth,
  v1_tokens_per_month: l.v1TokensPerMonth,
  isolation: l.isolation,
  user_namespace: l.userNamespace,
  syscall_filter: l.syscallFilter,
  max_gpus_by_type: l.maxGpusByType,
});

const fromJson = (b: Partial<LimitsJson>): Partial<WorkspaceLimits> => {
  const out: Partial<WorkspaceLimits> = {};
  if (b.max_containers !== undefined) out.maxContainers = b.max_containers;
  if (b.max_cpu_millicores !== undefined) out.maxCpuMillicores = b.max_cpu_millicores;
  if (b.max_memory_mb !== undefined) out.maxMemoryMb = b.max_memory_mb;
  if (b.max_gpus !== undefined) out.maxGpus = b.max_gpus;
  if (b.max_pending_tasks !== undefined) out.maxPendingTasks = b.max_pending_tasks;
  if (b.max_queue_items !== undefined) out.maxQueueItems = b.max_queue_items;
  if (b.max_volume_mb !== undefined) out.maxVolumeMb = b.max_volume_mb;
  if (b.max_inference_requests !== undefined) out.maxInferenceRequests = b.max_inference_requests;
  if (b.max_tokens_per_minute !== undefined) out.maxTokensPerMinute = b.max_tokens_per_minute;
  if (b.gpu_hours_per_month !== undefined) out.gpuHoursPerMonth = b.gpu_hours_per_month;
  if (b.cpu_hours_per_month !== undefined) out.cpuHoursPerMonth = b.cpu_hours_per_month;
  if (b.v1_tokens_per_month !== undefined) out.v1TokensPerMonth = b.v1_tokens_per_month;
  if (b.isolation !== undefined) out.isolation = b.isolation;
  if (b.user_namespace !== undefined) out.userNamespace = b.user_namespace;
  if (b.syscall_filter !== undefined) out.syscallFilter = b.syscall_filter;
  if (b.max_gpus_by_type !== undefined) out.maxGpusByType = b.max_gpus_by_type;
  return out;
};

/**
 * The opt-outs are checked on the body as sent, before the schema: the
 * schema's type coercion would read `"user_namespace": null` or `0` as false,
 * turning the user namespace off by accident, and its enum error does not
 * list the allowed values.
 */
function checkOptOutsAsSent(body: unknown): void {
  const b = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  checkOptOuts({
    userNamespace: b.user_namespace,
    syscallFilter: b.syscall_filter,
  } as Partial<WorkspaceLimits>);
}

export function limitRoutes(d: LimitRouteDeps): FastifyPluginAsync {
  /** `{ws}`: the caller's own workspace, or any workspace for an admin token; else not found. */
  const target = async (req: FastifyRequest): Promise<Workspace> => {
    const { ws } = req.params as { ws: string };
    const p = principalOf(req);
    if (ws === p.workspace.externalId) return p.workspace;
    const other = p.token.admin ? await d.workspaces.byExternalId(ws) : undefined;
    if (!other) throw new BerthError("not_found", `workspace ${ws} not found`);
    return other;
  };
  const answer = async (ws: Workspace, limits: WorkspaceLimits) => {
    const u = d.usage.containers?.(ws.id);
    const inf = d.usage.inference?.(ws.id);
    const month = await d.thisMonth?.(ws.id);
    const v1Tokens = await d.v1TokensThisMonth?.(ws.id);
    return {
      workspace_id: ws.externalId,
      limits: limitsJson(limits),
      usage: {
        containers: u?.containers ?? 0,
        cpu_millicores: u?.cpuMillicores ?? 0,
        memory_mb: Math.ceil((u?.memoryBytes ?? 0) / MiB),
        gpus: u?.gpus ?? 0,
        gpus_by_type: { ...u?.gpusByType },
        pending_tasks: d.usage.pendingTasks?.(ws.id) ?? 0,
        queue_items: (await d.usage.queueItems?.(ws.id)) ?? 0,
        volume_mb: Math.ceil(((await d.usage.volumeBytes?.(ws.id)) ?? 0) / MiB),
        inference_requests: inf?.requests ?? 0,
        tokens_last_minute: inf?.tokensLastMinute ?? 0,
        gpu_hours_this_month: hours(month?.gpuSeconds ?? 0),
        cpu_hours_this_month: hours(month?.cpuSeconds ?? 0),
        v1_tokens_this_month: v1Tokens ?? 0,
      },
    };
  };

  return async (app) => {
    app.get(
      "/api/v1/workspace/:ws/limits",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["workspaces"],
          summary: "The workspace's limits (null: none) and what it uses now",
          params: WsParams,
          response: { 200: LimitsResponse, ...WorkspaceErrors },
        },
      },
      async (req) => {
        const ws = await target(req);
        return answer(ws, await d.limits.get(ws.id));
      },
    );

    app.put(
      "/api/v1/workspace/:ws/limits",
      {
        config: { access: { needs: "cluster", audit: "limits.update" } },
        schema: {
          tags: ["workspaces"],
          summary: "Set the workspace's limits (admin token); fields left out keep their values",
          params: WsParams,
          body: LimitsChange,
          response: { 200: LimitsResponse, ...WorkspaceErrors },
        },
        preValidation: async (req) => checkOptOutsAsSent(req.body),
      },
      async (req) => {
        const ws = await target(req);
        const limits = await d.limits.set(ws.id, fromJson((req.body ?? {}) as Partial<LimitsJson>));
        d.onChange?.(ws.id);
        req.log.info({ workspaceId: ws.id, limits: limitsJson(limits) }, "workspace limits changed");
        return answer(ws, limits);
      },
    );
  };
}
