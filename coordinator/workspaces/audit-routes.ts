// GET /api/v1/audit/{ws}: the workspace's audit trail, newest first, paged
// like the other lists (docs/roles.md, Audit trail). Workspace admins only.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import {
  NextCursor,
  WorkspaceErrors,
  WsParams,
  pageOf,
  pageQuery,
  pageRequest,
  scopedWorkspace,
} from "../http/index.ts";
import { type AuditTrail, auditJson } from "./audit.ts";

const LIST = "audit";

export const AuditBody = Type.Object({
  id: Type.String(),
  at: Type.String({ format: "date-time" }),
  token: Type.Object({
    id: Type.String(),
    name: Type.String(),
    role: Type.String(),
    cluster_admin: Type.Boolean(),
  }),
  client_ip: Type.String(),
  user_agent: Type.String(),
  action: Type.String({
    description: "what was changed: deployment.delete, secret.update, token.create, ...",
  }),
  method: Type.String(),
  route: Type.String({ description: "the route's pattern" }),
  object_id: Type.Union([Type.String(), Type.Null()]),
  status: Type.Integer({ description: "the HTTP status answered" }),
  outcome: Type.Union([Type.Literal("ok"), Type.Literal("denied"), Type.Literal("failed")]),
  error_code: Type.Union([Type.String(), Type.Null()]),
});

export function auditRoutes(trail: AuditTrail): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/audit/:ws",
      {
        config: { access: { needs: "manage" } },
        schema: {
          tags: ["audit"],
          summary: "The workspace's audit trail: every change, newest first (admin token)",
          params: WsParams,
          querystring: pageQuery({
            action: Type.Optional(
              Type.String({ minLength: 1, maxLength: 100, description: "only this action" }),
            ),
          }),
          response: {
            200: Type.Object({ records: Type.Array(AuditBody), next_cursor: NextCursor }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const q = req.query as { limit?: number; cursor?: string; action?: string };
        const page = pageRequest(LIST, q, 2);
        const rows = await trail.list(ws.id, page, q.action);
        const { items, next_cursor } = pageOf(LIST, rows, page.limit, (r) => [r.at, r.id]);
        return { records: items.map(auditJson), next_cursor };
      },
    );
  };
}
