// Databases and stacks (the spec's Workspace REST API table) come in a later
// issue. Their routes exist now so clients get a clear 501 not_implemented
// instead of route_not_found, after the same token and workspace checks as
// every workspace route (another workspace's id is 404, not 501).

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../../shared/errors.ts";
import { ErrorResponse } from "../schemas.ts";
import { scopedWorkspace, WorkspaceErrors, WsParams } from "./workspace-scope.ts";

const LATER: { method: "GET" | "POST" | "PUT"; url: string; area: "databases" | "stacks" }[] = [
  { method: "GET", url: "/api/v1/database/:ws", area: "databases" },
  { method: "POST", url: "/api/v1/database/:ws", area: "databases" },
  { method: "GET", url: "/api/v1/stack/:ws", area: "stacks" },
  { method: "POST", url: "/api/v1/stack/:ws", area: "stacks" },
  { method: "PUT", url: "/api/v1/stack/:ws/:stackId", area: "stacks" },
];

export function notYetRoutes(): FastifyPluginAsync {
  return async (app) => {
    for (const r of LATER) {
      app.route({
        method: r.method,
        url: r.url,
        schema: {
          tags: [r.area],
          summary: `Not implemented yet: ${r.area} come in a later release (501)`,
          params: r.url.includes(":stackId")
            ? Type.Object({ ws: Type.String(), stackId: Type.String() })
            : WsParams,
          // Whatever body comes is not read.
          response: { ...WorkspaceErrors, 501: ErrorResponse },
        },
        handler: async (req) => {
          scopedWorkspace(req);
          throw new BerthError(
            "not_implemented",
            `${r.area} are not implemented yet: ${r.method} ${r.url.replace(/:(\w+)/g, "{$1}")} comes in a later release of berth`,
          );
        },
      });
    }
  };
}
