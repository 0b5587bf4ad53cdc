import { type TSchema, Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { cpuMillicores } from "../scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import type { StubConfig } from "../../shared/tasks.ts";
import type { StubRecord } from "./stub-store.ts";
import type { TaskRecord } from "./store.ts";
import { type CostRates, estimateTaskCost, requestedResources } from "./cost.ts";
import type { TaskService } from "./service.ts";
import { isTerminal } from "./transitions.ts";
import { principalOf } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };
const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

/** The cost estimate (docs/api.md "Task cost"); null until the task starts. */
export const TaskCostBody = Type.Object(
  {
    estimate: Type.Number({ description: "cpu + memory + gpu" }),
    currency: Type.Optional(Type.String({ description: "as the operator configured it" })),
    cpu: Type.Number(),
    memory: Type.Number(),
    gpu: Type.Number(),
    duration_seconds: Type.Number({ description: "ended_at - started_at (now - started_at while running)" }),
    gpu_seconds: Type.Number({ description: "the GPUs it requested x duration_seconds" }),
    final: Type.Boolean({ description: "false while the task runs" }),
    rates: Type.Object({
      cpu_core_per_second: Type.Number(),
      memory_gib_per_second: Type.Number(),
      gpu_per_second: Type.Number({ description: "the rate of the GPU type the task requested" }),
    }),
  },
  { description: "duration x per-second rates of the requested CPU, memory and GPU" },
);

/**
 * The spec's Task object (task status API), field for field. The spec says
 * the per-task cost is not returned by this API: the REST task routes
 * (routes/tasks.ts) add it.
 */
export const TaskBody = Type.Object({
  id: Type.String(),
  started_at: Nullable(Type.String({ format: "date-time" })),
  ended_at: Nullable(Type.String({ format: "date-time" })),
  status: Type.String(),
  container_id: Type.String(),
  updated_at: Type.String({ format: "date-time" }),
  created_at: Type.String({ format: "date-time" }),
  outputs: Type.Array(Type.Unknown()),
  stats: Type.Object({ active_containers: Type.Integer(), queue_depth: Type.Integer() }),
  stub: Type.Object({
    id: Type.String(),
    name: Type.String(),
    type: Type.String(),
    config: Type.String({ description: "StubConfig as a JSON string" }),
    config_version: Type.Integer(),
    object_id: Type.Union([Type.Integer(), Type.Null()]),
    created_at: Type.String({ format: "date-time" }),
    updated_at: Type.String({ format: "date-time" }),
  }),
});

/** The task's cost from its stub's request; an ended row without ended_at ends at its last update. */
export function taskCost(t: TaskRecord, stub: StubRecord, rates: CostRates, now?: number) {
  const endedAt = t.endedAt ?? (isTerminal(t.status) ? t.updatedAt : null);
  return estimateTaskCost({ startedAt: t.startedAt, endedAt }, requestedResources(stub), rates, now);
}

/**
 * The decoded `stub.config` the task status API reports: the stub's config
 * with the values true of this task's container, typed as the spec's table
 * types them (docs/api.md, "stub.config"): `runtime.cpu` in millicores (an
 * integer, as beta9 reports it; the stored config rounds up to whole cores),
 * `task_policy.expires` the ISO timestamp after which this task, not yet
 * started, expires ("" when it never does) instead of the stub's policy
 * (seconds from creation or a fixed time); `python_version` the version the
 * task's container runs when it could be asked (else the registered one).
 */
export function reportedStubConfig(
  stub: Pick<StubRecord, "config" | "extra">,
  t: Pick<TaskRecord, "expiresAt">,
  containerPython?: string,
): StubConfig {
  const c = stub.config;
  return {
    ...c,
    python_version: containerPython ?? c.python_version,
    runtime: { ...c.runtime, cpu: cpuMillicores(stub) },
    task_policy: {
      ...c.task_policy,
      expires: t.expiresAt === null ? "" : new Date(t.expiresAt).toISOString(),
    },
  };
}

/** A task's Outputs (OutputStore.ofTask; docs/outputs.md). */
export type TaskOutputs = (workspaceId: string, taskId: string) => Promise<unknown[]>;

/** The Python version the task's container runs (coordinator/containers/python-version.ts). */
export type ContainerPython = (agentId: string, containerId: string) => Promise<string | undefined>;

/** The spec's Task object, and the stub it was read with. */
export async function taskJson(
  tasks: TaskService,
  workspaceId: string,
  t: TaskRecord,
  outputs?: TaskOutputs,
  pythonOf?: ContainerPython,
) {
  const stub = await tasks.getStub(workspaceId, t.stubId);
  const python =
    pythonOf && t.agentId && t.containerId ? await pythonOf(t.agentId, t.containerId) : undefined;
  const json = {
    id: t.id,
    started_at: t.startedAt,
    ended_at: t.endedAt,
    status: t.status,
    container_id: t.containerId ?? "",
    updated_at: t.updatedAt,
    created_at: t.createdAt,
    outputs: outputs ? await outputs(workspaceId, t.id) : [],
    stats: { active_containers: tasks.activeContainers(stub.id), queue_depth: tasks.queueDepth(stub.id) },
    stub: {
      id: stub.id,
      name: stub.name,
      type: stub.type,
      config: JSON.stringify(reportedStubConfig(stub, t, python)),
      config_version: stub.configVersion,
      object_id: stub.objectId,
      created_at: stub.createdAt,
      updated_at: stub.updatedAt,
    },
  };
  return { json, stub };
}

/** The name of the deployment that runs a stub, if one does (DeploymentService.nameOfStub). */
export type DeploymentOfStub = (workspaceId: string, stubId: string) => Promise<string | undefined>;

export interface TaskStatusRouteDeps {
  outputs?: TaskOutputs;
  pythonOf?: ContainerPython;
  /** Without it, a token narrowed to deployments reads no task. */
  deploymentOf?: DeploymentOfStub;
}

/** The task status API (/v2/task/{id}/) and the callback signature token. */
export function taskStatusRoutes(tasks: TaskService, d: TaskStatusRouteDeps = {}): FastifyPluginAsync {
  return async (app) => {
    const v2 = async (req: FastifyRequest) => {
      const { taskId } = req.params as { taskId: string };
      const p = principalOf(req);
      const ws = p.workspace.id;
      const task = await tasks.getTask(ws, taskId);
      // A token narrowed to deployments polls their tasks only; any other
      // task is as absent to it as another workspace's.
      const narrowed = p.token.deployments;
      if (narrowed !== null) {
        const name = await d.deploymentOf?.(ws, task.stubId);
        if (name === undefined || !narrowed.includes(name)) {
          throw new BerthError("not_found", `task ${taskId} not found`);
        }
      }
      return (await taskJson(tasks, ws, task, d.outputs, d.pythonOf)).json;
    };
    const v2Schema = {
      tags: ["tasks"],
      summary: "The task status API: one task of the caller's workspace",
      params: Type.Object({ taskId: Type.String() }),
      response: { 200: TaskBody, ...errors },
    };
    app.get(
      "/v2/task/:taskId/",
      { config: { access: { needs: "invoke", deployment: "by-handler" } }, schema: v2Schema },
      v2,
    );
    app.get(
      "/v2/task/:taskId",
      {
        config: { access: { needs: "invoke", deployment: "by-handler" } },
        schema: { ...v2Schema, hide: true },
      },
      v2,
    );

    app.get(
      "/api/v1/workspace/current/signature-token",
      {
        config: { access: { needs: "manage" } },
        schema: {
          tags: ["workspace"],
          summary: "The workspace's callback signature token (admin token)",
          response: { 200: Type.Object({ signature_token: Type.String() }), ...errors },
        },
      },
      async (req) => {
        const p = principalOf(req);
        return { signature_token: await tasks.signatureToken(p.workspace.id) };
      },
    );
  };
}
