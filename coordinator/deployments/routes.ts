import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { DeploymentService } from "./service.ts";
import type { DeploymentRecord } from "./store.ts";
import type { TaskService } from "../tasks/index.ts";
import { principalOf } from "../http/index.ts";
import { NextCursor, pageQuery, pageRequest, paginate } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

// Deployment records of a workspace: list, details (with containers, queue
// depth and scaling events), URL, stop, start, delete (docs/deployments.md).

export const DeploymentBody = Type.Object({
  id: Type.String(),
  name: Type.String(),
  version: Type.Integer({ description: "1, 2, ... per name; 0 for a serve session" }),
  type: Type.String({ description: "the kind: endpoint, asgi, realtime, taskqueue, schedule or function" }),
  stub_id: Type.String(),
  active: Type.Boolean(),
  serve: Type.Boolean(),
  url: Type.String({ description: "where it is called; empty for schedules and functions" }),
  host_url: Type.Optional(
    Type.String({ description: "its own host name, when the coordinator has an endpointDomain" }),
  ),
  created_at: Type.String(),
  updated_at: Type.String(),
  last_request_at: Type.Union([Type.String(), Type.Null()], {
    description: "the last call (written at most every few seconds); null before the first",
  }),
});

const ScalingEventBody = Type.Object({
  at: Type.String(),
  stub_id: Type.String(),
  from: Type.Integer(),
  to: Type.Integer(),
  reason: Type.String(),
  queue_depth: Type.Integer(),
});

const DeploymentDetails = Type.Intersect([
  DeploymentBody,
  Type.Object({
    containers: Type.Integer({ description: "running containers of the deployment's stub" }),
    queue_depth: Type.Integer({ description: "tasks waiting for a container" }),
    events: Type.Array(ScalingEventBody, { description: "recent scaling decisions, oldest first" }),
    start_error: Type.Union([Type.String(), Type.Null()], {
      description:
        "why its last container start failed (e.g. a pod's entrypoint), until a container is healthy",
    }),
  }),
]);

export function deploymentJson(deployments: DeploymentService, d: DeploymentRecord) {
  return {
    id: d.id,
    name: d.name,
    version: d.version,
    type: d.kind,
    stub_id: d.stubId,
    active: d.active,
    serve: d.serve,
    url: deployments.urlOf(d),
    ...(deployments.hostUrlOf(d) ? { host_url: deployments.hostUrlOf(d) } : {}),
    created_at: d.createdAt,
    updated_at: d.updatedAt,
    last_request_at: d.lastRequestAt,
  };
}

const errors = { 400: ErrorResponse, 401: ErrorResponse, 404: ErrorResponse };
const WsParams = Type.Object({ ws: Type.String() });
const WsIdParams = Type.Object({ ws: Type.String(), id: Type.String() });

/** `{ws}` is the caller's own workspace (external id); any other reads as not found. */
function workspaceOf(req: FastifyRequest): string {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return workspace.id;
}

export interface DeploymentRouteDeps {
  deployments: DeploymentService;
  tasks: Pick<TaskService, "queueDepth">;
  /** The container manager's count of a stub's running containers, and why its last start failed. */
  containers: { activeContainers(stubId: string): number; startError?(stubId: string): string | undefined };
}

/** `/api/v1/deployment/...`: the workspace's deployments. */
export function deploymentRoutes(d: DeploymentRouteDeps): FastifyPluginAsync {
  const { deployments } = d;
  return async (app) => {
    app.get(
      "/api/v1/deployment/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's deployments, newest first, a page at a time (optionally of one name)",
          params: WsParams,
          querystring: pageQuery({ name: Type.Optional(Type.String({ minLength: 1 })) }),
          response: {
            200: Type.Object({ deployments: Type.Array(DeploymentBody), next_cursor: NextCursor }),
            ...errors,
          },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        const q = req.query as { name?: string; limit?: number; cursor?: string };
        const page = pageRequest("deployments", q, 3);
        const list = await deployments.list(ws, q.name === undefined ? {} : { name: q.name });
        // The store's order (newest, then highest version first), made total by the id.
        const key = (x: DeploymentRecord) => [x.createdAt, x.version, x.id];
        const { items, next_cursor } = paginate("deployments", list, key, page, "desc");
        return { deployments: items.map((x) => deploymentJson(deployments, x)), next_cursor };
      },
    );

    // One route for both `/{ws}/{id}` and `/{id}/url`: the router cannot tell
    // two parameters apart by name at the same position.
    app.get(
      "/api/v1/deployment/:ws/:id",
      {
        // `/{id}/url` has a deployment id where `{ws}` stands.
        config: { access: { needs: "read", wsIsWorkspace: (p) => p.id !== "url" } },
        schema: {
          summary:
            "One deployment with its containers, queue depth and scaling events; `{id}/url` answers its URL alone",
          params: WsIdParams,
          response: { 200: Type.Union([DeploymentDetails, Type.Object({ url: Type.String() })]), ...errors },
        },
      },
      async (req) => {
        const { ws: first, id: second } = req.params as { ws: string; id: string };
        if (second === "url") {
          return { url: await deployments.url(principalOf(req).workspace.id, first) };
        }
        const dep = await deployments.get(workspaceOf(req), second);
        return {
          ...deploymentJson(deployments, dep),
          containers: d.containers.activeContainers(dep.stubId),
          queue_depth: d.tasks.queueDepth(dep.stubId),
          events: deployments.scalingEvents(dep.id),
          start_error: d.containers.startError?.(dep.stubId) ?? null,
        };
      },
    );

    for (const action of ["stop", "start"] as const) {
      app.post(
        `/api/v1/deployment/:ws/${action}/:id`,
        {
          config: { access: { needs: "write", audit: `deployment.${action}` } },
          schema: {
            summary:
              action === "stop"
                ? "Stops a deployment: calls to it answer 409 and its containers stop"
                : "Starts a stopped deployment again",
            params: WsIdParams,
            response: { 200: DeploymentBody, ...errors },
          },
        },
        async (req) => {
          const ws = workspaceOf(req);
          const { id } = req.params as { id: string };
          const dep = action === "stop" ? await deployments.stop(ws, id) : await deployments.start(ws, id);
          return deploymentJson(deployments, dep);
        },
      );
    }

    app.delete(
      "/api/v1/deployment/:ws/:id",
      {
        config: { access: { needs: "write", audit: "deployment.delete" } },
        schema: {
          summary: "Deletes a deployment: its containers stop and its queued tasks fail",
          params: WsIdParams,
          response: { 204: Type.Null(), ...errors },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        const { id } = req.params as { id: string };
        await deployments.delete(ws, id);
        reply.status(204).send();
      },
    );
  };
}
