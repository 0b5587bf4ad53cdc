// `/api/v1/container/{ws}` (docs/api.md "Containers"): the workspace's
// containers, a page at a time: the runners the container manager tracks
// (starting, running, stopping) and the sandboxes and pods that are not
// terminated, each with its kind.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { ManagedContainerInfo } from "../containers/index.ts";
import type { SandboxContainerInfo } from "./types.ts";
import { NextCursor, pageQuery, pageRequest, paginate } from "../http/index.ts";
import { scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";

export interface ContainerRouteDeps {
  /** The container manager's containers (every workspace's: the route keeps the caller's). */
  containers: { list(): ManagedContainerInfo[] };
  /** The workspace's sandboxes and pods that are not terminated. @default none listed */
  sandboxes?: (workspaceId: string) => Promise<SandboxContainerInfo[]>;
}

type Listed = ManagedContainerInfo & { kind: "runner" | "sandbox" | "pod" };

const ContainerStatus = Type.Union([
  Type.Literal("starting"),
  Type.Literal("running"),
  Type.Literal("stopping"),
]);

export const ContainerBody = Type.Object({
  id: Type.String(),
  stub_id: Type.String(),
  agent_id: Type.String({ description: "the host it runs on" }),
  status: ContainerStatus,
  since: Type.String({ format: "date-time", description: "when it was placed, then when it was running" }),
  kind: Type.Union([Type.Literal("runner"), Type.Literal("sandbox"), Type.Literal("pod")], {
    description:
      "runner: runs a stub's tasks or requests; sandbox and pod: started through the SDK or deployed",
  }),
});

const containerJson = (c: Listed) => ({
  id: c.id,
  stub_id: c.stubId,
  agent_id: c.agentId,
  status: c.state,
  since: new Date(c.since).toISOString(),
  kind: c.kind,
});

const LIST = "containers";

export function containerRoutes(d: ContainerRouteDeps): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/container/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["containers"],
          summary: "The workspace's containers, newest first",
          params: WsParams,
          querystring: pageQuery({
            stub_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
            status: Type.Optional(ContainerStatus),
          }),
          response: {
            200: Type.Object({ containers: Type.Array(ContainerBody), next_cursor: NextCursor }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const q = req.query as { stub_id?: string; status?: string; limit?: number; cursor?: string };
        const page = pageRequest(LIST, q, 2);
        const runners: Listed[] = d.containers.list().map((c) => ({ ...c, kind: "runner" }));
        const sandboxes: Listed[] = d.sandboxes ? await d.sandboxes(ws.id) : [];
        const mine = [...runners, ...sandboxes].filter(
          (c) =>
            c.workspaceId === ws.id &&
            (q.stub_id === undefined || c.stubId === q.stub_id) &&
            (q.status === undefined || c.state === q.status),
        );
        const { items, next_cursor } = paginate(LIST, mine, (c) => [c.since, c.id], page, "desc");
        return { containers: items.map(containerJson), next_cursor };
      },
    );
  };
}
