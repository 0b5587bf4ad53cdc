// `/api/v1/events/{ws}` (docs/events.md): the workspace's events as
// CloudEvents, a page at a time (history) or live as server-sent events
// (stream), resumable from an event id. Only the caller's own workspace is
// ever read: the stream filters by its internal id.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { type BerthEvent, toCloudEvent } from "./types.ts";
import type { EventStream } from "./stream.ts";
import { MAX_HISTORY_LIMIT } from "./stream.ts";
import { principalOf } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";
import { openSse, pumpSse, resumeId, SSE_HEARTBEAT_MS } from "../http/index.ts";

export interface EventRouteDeps {
  events: Pick<EventStream, "history" | "follow">;
  /** @default SSE_HEARTBEAT_MS */
  heartbeatMs?: number;
}

export const CloudEventBody = Type.Object(
  {
    specversion: Type.Literal("1.0"),
    id: Type.String(),
    source: Type.String(),
    type: Type.String(),
    subject: Type.String(),
    time: Type.String({ format: "date-time" }),
    datacontenttype: Type.Literal("application/json"),
    data: Type.Record(Type.String(), Type.Unknown()),
  },
  { additionalProperties: false },
);

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };
const WsParams = Type.Object({ ws: Type.String() });
const HistoryQuery = Type.Object(
  {
    after: Type.Optional(Type.String({ description: "ISO 8601: only events after this time" })),
    before: Type.Optional(Type.String({ description: "ISO 8601: only events before this time" })),
    type: Type.Optional(
      Type.String({ description: 'comma-separated: exact types, "prefix.*" or "*"', maxLength: 1000 }),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_HISTORY_LIMIT, default: 100 })),
    cursor: Type.Optional(Type.String({ maxLength: 40, description: "next_cursor of the previous page" })),
  },
  { additionalProperties: false },
);
const StreamQuery = Type.Object(
  { from_id: Type.Optional(Type.String({ maxLength: 100, description: "resume after this event id" })) },
  { additionalProperties: false },
);

/** `{ws}` is the caller's own workspace (external id); any other reads as not found. */
function workspaceOf(req: FastifyRequest): string {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return workspace.id;
}

/**
 * The audit trail's events (`audit.*`) go to webhooks, not to these routes:
 * the trail is for workspace admins (GET /api/v1/audit/{ws}), and these
 * routes are for every reader of the workspace.
 */
const listed = (ev: BerthEvent) => !ev.type.startsWith("audit.");

async function* withoutAudit(feed: AsyncIterable<BerthEvent>): AsyncIterable<BerthEvent> {
  for await (const ev of feed) if (listed(ev)) yield ev;
}

export function eventRoutes(deps: EventRouteDeps): FastifyPluginAsync {
  const heartbeatMs = deps.heartbeatMs ?? SSE_HEARTBEAT_MS;
  return async (app) => {
    app.get(
      "/api/v1/events/:ws/history",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's events as CloudEvents, oldest first, a page at a time",
          params: WsParams,
          querystring: HistoryQuery,
          response: {
            200: Type.Object({
              events: Type.Array(CloudEventBody),
              next_cursor: Type.Union([Type.String(), Type.Null()]),
            }),
            ...errors,
          },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        const q = req.query as {
          after?: string;
          before?: string;
          type?: string;
          limit?: number;
          cursor?: string;
        };
        const page = await deps.events.history(ws, q);
        return { events: page.events.filter(listed).map(toCloudEvent), next_cursor: page.next_cursor };
      },
    );

    app.get(
      "/api/v1/events/:ws/stream",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's events as server-sent events as they happen, resumable from an event id",
          params: WsParams,
          querystring: StreamQuery,
          headers: Type.Object({ "last-event-id": Type.Optional(Type.String({ maxLength: 100 })) }),
          response: {
            200: Type.String({
              description: "text/event-stream: id = event id, event = type, data = CloudEvent JSON",
            }),
            ...errors,
          },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        const fromId = resumeId(req, (req.query as { from_id?: string }).from_id);
        // Before the response starts, so an unknown id is an ordinary 400.
        const feed = await deps.events.follow(ws, fromId ? { fromId } : {});
        const sse = openSse(reply, { heartbeatMs, greeting: "connected", onEnd: () => feed.close() });
        void pumpSse(
          sse,
          withoutAudit(feed),
          (ev) => ({ id: ev.id, event: ev.type, data: toCloudEvent(ev) }),
          (e) => req.log.warn({ err: e.message }, "events: the stream ended"),
        );
        return reply;
      },
    );
  };
}
