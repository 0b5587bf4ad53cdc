import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../../shared/errors.ts";
import type { Store } from "../../store/store.ts";
import type { TaskRecord } from "../../store/tasks.ts";
import type { TaskService } from "../../tasks/service.ts";
import { authenticator, principalOf, requireAdmin } from "../auth.ts";
import { ErrorResponse } from "../schemas.ts";

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };
const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);

/** The spec's Task object (task status API), field for field. */
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

const HistoryEntry = Type.Object({
  status: Type.String(),
  attempt: Type.Integer(),
  container_id: Type.Union([Type.String(), Type.Null()]),
  reason: Type.Union([Type.String(), Type.Null()]),
  at: Type.String(),
});

const TaskWithHistory = Type.Composite([TaskBody, Type.Object({ history: Type.Array(HistoryEntry) })]);

async function taskJson(tasks: TaskService, workspaceId: string, t: TaskRecord) {
  const stub = await tasks.getStub(workspaceId, t.stubId);
  return {
    id: t.id,
    started_at: t.startedAt,
    ended_at: t.endedAt,
    status: t.status,
    container_id: t.containerId ?? "",
    updated_at: t.updatedAt,
    created_at: t.createdAt,
    outputs: [],
    stats: { active_containers: tasks.activeContainers(stub.id), queue_depth: tasks.queueDepth(stub.id) },
    stub: {
      id: stub.id,
      name: stub.name,
      type: stub.type,
      config: JSON.stringify(stub.config),
      config_version: stub.configVersion,
      object_id: stub.objectId,
      created_at: stub.createdAt,
      updated_at: stub.updatedAt,
    },
  };
}

/** The task status API (/v2/task/{id}/), the REST task route and the callback signature token. */
export function taskStatusRoutes(store: Store, tasks: TaskService): FastifyPluginAsync {
  return async (app) => {
    app.addHook("onRequest", authenticator(store.tokens));

    const v2 = async (req: FastifyRequest) => {
      const { taskId } = req.params as { taskId: string };
      const ws = principalOf(req).workspace.id;
      return taskJson(tasks, ws, await tasks.getTask(ws, taskId));
    };
    const v2Schema = {
      params: Type.Object({ taskId: Type.String() }),
      response: { 200: TaskBody, ...errors },
    };
    app.get("/v2/task/:taskId/", { schema: v2Schema }, v2);
    app.get("/v2/task/:taskId", { schema: v2Schema }, v2);

    app.get(
      "/api/v1/task/:ws/:taskId",
      {
        schema: {
          params: Type.Object({ ws: Type.String(), taskId: Type.String() }),
          response: { 200: TaskWithHistory, ...errors },
        },
      },
      async (req) => {
        const { ws, taskId } = req.params as { ws: string; taskId: string };
        const workspace = principalOf(req).workspace;
        if (ws !== workspace.externalId) throw new BerthError("not_found", `task ${taskId} not found`);
        // History first: it reads committed rows, the task its newer live state, so the
        // answer never shows a status older than its own history.
        const committed = await tasks.history(workspace.id, taskId);
        const t = await tasks.getTask(workspace.id, taskId);
        const history = committed.map((h) => ({
          status: h.status,
          attempt: h.attempt,
          container_id: h.containerId,
          reason: h.reason,
          at: h.at,
        }));
        return { ...(await taskJson(tasks, workspace.id, t)), history };
      },
    );

    app.get(
      "/api/v1/workspace/current/signature-token",
      { schema: { response: { 200: Type.Object({ signature_token: Type.String() }), ...errors } } },
      async (req) => {
        const p = requireAdmin(req);
        return { signature_token: await tasks.signatureToken(p.workspace.id) };
      },
    );
  };
}
