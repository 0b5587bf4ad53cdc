// Bot sessions in the workspace REST API (docs/bots.md): open a session,
// push markers into a location, read a session's state and history. The
// session's user usually talks over the websocket (coordinator/bots/
// websocket.ts); these routes are the same operations for scripts, the SDK
// client and inspection, scoped to the token's workspace like every route.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { type BotEngine, MAX_MARKERS_PER_PUSH } from "./engine.ts";
import type { BotSession, BotSessionEvent } from "./store.ts";
import { scopedWorkspace, WorkspaceErrors } from "../http/index.ts";

const errors = { ...WorkspaceErrors, 409: WorkspaceErrors[400], 429: WorkspaceErrors[400] };

const Markers = Type.Record(Type.String(), Type.Array(Type.Unknown()), {
  description: "marker type name -> its markers (JSON objects of the type's fields), oldest first",
});

const SessionBody = Type.Object({
  id: Type.String(),
  bot: Type.String(),
  version: Type.Integer({ description: "changes so far; the seq of the latest history entry" }),
  locations: Markers,
  in_flight: Type.Array(
    Type.Object({
      firing: Type.Integer(),
      transition: Type.String(),
      task_id: Type.Union([Type.String(), Type.Null()]),
      taken: Markers,
    }),
  ),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const HistoryEntry = Type.Object({
  seq: Type.Integer(),
  kind: Type.String({ description: "created, put, take, start, finish or fail" }),
  body: Type.Record(Type.String(), Type.Unknown()),
  at: Type.String(),
});

const SessionParams = Type.Object({ ws: Type.String(), session_id: Type.String() });
const BotParams = Type.Object({ ws: Type.String(), name: Type.String() });

const PushBody = Type.Object(
  {
    location: Type.String({ minLength: 1, description: "the marker type name of the location" }),
    markers: Type.Array(Type.Record(Type.String(), Type.Unknown()), {
      minItems: 1,
      maxItems: MAX_MARKERS_PER_PUSH,
    }),
  },
  { additionalProperties: false },
);

/** The whole session (every location, hidden ones too): the workspace's own view. */
export function sessionJson(s: BotSession) {
  return {
    id: s.id,
    bot: s.botName,
    version: s.version,
    locations: s.state.locations,
    in_flight: Object.entries(s.state.inFlight).map(([k, f]) => ({
      firing: Number(k),
      transition: f.transition,
      task_id: f.taskId ?? null,
      taken: f.taken,
    })),
    created_at: s.createdAt,
    updated_at: s.updatedAt,
  };
}

const historyJson = (h: BotSessionEvent[]) =>
  h.map((e) => ({ seq: e.seq, kind: e.kind, body: e.body, at: e.at }));

export function botRoutes(bots: BotEngine): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/bot/:ws/:name/sessions",
      {
        config: { access: { needs: "invoke" } },
        schema: {
          summary: "Open a session of a deployed bot (its latest active version)",
          params: BotParams,
          response: { 201: Type.Object({ session: SessionBody }), ...errors },
        },
      },
      async (req, reply) => {
        const ws = scopedWorkspace(req);
        const s = await bots.create(ws.id, (req.params as { name: string }).name);
        reply.code(201);
        return { session: sessionJson(s) };
      },
    );

    app.get(
      "/api/v1/bot/:ws/sessions/:session_id",
      {
        config: { access: { needs: "invoke" } },
        schema: {
          summary: "A bot session's markers per location, firings in flight and history",
          params: SessionParams,
          response: {
            200: Type.Object({ session: SessionBody, history: Type.Array(HistoryEntry) }),
            ...errors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const id = (req.params as { session_id: string }).session_id;
        const s = await bots.get(ws.id, id);
        return { session: sessionJson(s), history: historyJson(await bots.history(ws.id, id)) };
      },
    );

    app.post(
      "/api/v1/bot/:ws/sessions/:session_id/markers",
      {
        config: { access: { needs: "invoke" } },
        schema: {
          summary: "Put markers into a location of the session; fires the transitions they enable",
          params: SessionParams,
          body: PushBody,
          response: { 200: Type.Object({ session: SessionBody }), ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const id = (req.params as { session_id: string }).session_id;
        const b = req.body as { location: string; markers: Record<string, unknown>[] };
        return { session: sessionJson(await bots.push(ws.id, id, b.location, b.markers)) };
      },
    );
  };
}
