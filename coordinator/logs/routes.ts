// `/api/v1/logs/{ws}` (docs/logs.md): what the workspace's containers
// printed, a page at a time or live as server-sent events, resumable from a
// line id. Only the caller's own workspace is ever read: the log query
// filters by its internal id. Logs are never delivered to webhooks.

import { type Static, Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { type LogQuery, type LogWorkspace, MAX_LOG_LIMIT } from "./query.ts";
import { principalOf } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";
import { openSse, pumpSse, resumeId, SSE_HEARTBEAT_MS } from "../http/index.ts";

export interface LogRouteDeps {
  logs: Pick<LogQuery, "query" | "follow">;
  /** @default SSE_HEARTBEAT_MS */
  heartbeatMs?: number;
}

export const LogLineBody = Type.Object(
  {
    id: Type.String({ description: "the line's cursor: `{stream sequence}-{index}`" }),
    timestamp: Type.String({ format: "date-time" }),
    workspace_id: Type.String(),
    stub_id: Type.String(),
    container_id: Type.String(),
    task_id: Type.Union([Type.String(), Type.Null()]),
    stream: Type.Union([Type.Literal("stdout"), Type.Literal("stderr")]),
    line: Type.String(),
  },
  { additionalProperties: false },
);

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };
const WsParams = Type.Object({ ws: Type.String() });
const id = (what: string) =>
  Type.Optional(Type.String({ maxLength: 128, description: `only lines of this ${what}` }));
const filters = {
  stub_id: id("stub"),
  container_id: id("container"),
  task_id: id("task"),
  since: Type.Optional(
    Type.String({ maxLength: 64, description: "ISO 8601: lines printed at or after this time" }),
  ),
  text: Type.Optional(
    Type.String({ maxLength: 1000, description: "case-insensitive substring of the line" }),
  ),
};
const cursor = Type.Optional(
  Type.String({ maxLength: 40, description: "resume after this line id (next_cursor)" }),
);
const ListQuery = Type.Object(
  {
    ...filters,
    until: Type.Optional(
      Type.String({ maxLength: 64, description: "ISO 8601: lines printed before this time" }),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_LOG_LIMIT, default: 100 })),
    cursor,
  },
  { additionalProperties: false },
);
const StreamQuery = Type.Object({ ...filters, cursor }, { additionalProperties: false });

/** `{ws}` is the caller's own workspace (external id); any other reads as not found. */
function workspaceOf(req: FastifyRequest): LogWorkspace {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return { id: workspace.id, externalId: workspace.externalId };
}

const filtersOf = (q: Static<typeof StreamQuery>) => ({
  ...(q.stub_id !== undefined ? { stubId: q.stub_id } : {}),
  ...(q.container_id !== undefined ? { containerId: q.container_id } : {}),
  ...(q.task_id !== undefined ? { taskId: q.task_id } : {}),
  ...(q.since !== undefined ? { since: q.since } : {}),
  ...(q.text !== undefined ? { text: q.text } : {}),
});

export function logRoutes(deps: LogRouteDeps): FastifyPluginAsync {
  const heartbeatMs = deps.heartbeatMs ?? SSE_HEARTBEAT_MS;
  return async (app) => {
    app.get(
      "/api/v1/logs/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["logs"],
          summary: "Container log lines of the workspace, oldest first, a page at a time",
          params: WsParams,
          querystring: ListQuery,
          response: {
            200: Type.Object({
              lines: Type.Array(LogLineBody),
              next_cursor: Type.Union([Type.String(), Type.Null()]),
            }),
            ...errors,
          },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        const q = req.query as Static<typeof ListQuery>;
        return deps.logs.query(ws, {
          ...filtersOf(q),
          ...(q.until !== undefined ? { until: q.until } : {}),
          ...(q.limit !== undefined ? { limit: q.limit } : {}),
          ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
        });
      },
    );

    app.get(
      "/api/v1/logs/:ws/stream",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["logs"],
          summary: "Container log lines of the workspace as they are printed (server-sent events)",
          params: WsParams,
          querystring: StreamQuery,
          headers: Type.Object({ "last-event-id": Type.Optional(Type.String({ maxLength: 40 })) }),
          response: {
            200: Type.String({
              description: "text/event-stream: id = line id, event = log, data = the line's JSON",
            }),
            ...errors,
          },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        const q = req.query as Static<typeof StreamQuery>;
        const from = resumeId(req, q.cursor);
        const abort = new AbortController();
        // Before the response starts, so a bad filter or cursor is an ordinary 400.
        const feed = await deps.logs.follow(ws, filtersOf(q), from, abort.signal);
        const sse = openSse(reply, { heartbeatMs, greeting: "connected", onEnd: () => abort.abort() });
        void pumpSse(
          sse,
          feed,
          (l) => ({ id: l.id, event: "log", data: l }),
          (e) => req.log.warn({ err: e.message }, "logs: the stream ended"),
        );
        return reply;
      },
    );
  };
}
