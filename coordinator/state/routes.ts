// Queue, Map and Signal over HTTP (docs/queues.md): the SDK's one gateway
// route outside containers (POST /api/v1/gateway/state, the same requests
// agents relay for containers), and the REST routes `berth queue`, `berth
// map` and `berth signal` read and manage them with. Every route acts in the
// token's workspace; another workspace's `{ws}` reads as not found.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { STATE_OPS, type StateRequest } from "../../shared/objects.ts";
import { checkObjectName } from "./names.ts";
import type { StateObjects } from "./state.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";

const NameParams = Type.Object({ ws: Type.String(), name: Type.String() });
const Sized = Type.Object({ name: Type.String(), size: Type.Integer() });
const SignalBody = Type.Object({
  name: Type.String(),
  set: Type.Boolean(),
  revision: Type.Integer(),
  expires_at: Type.Union([Type.String(), Type.Null()]),
});
const errors = { ...WorkspaceErrors, 413: WorkspaceErrors[400], 429: WorkspaceErrors[400] };

const StateBody = Type.Object(
  {
    op: Type.Union(STATE_OPS.map((op) => Type.Literal(op))),
    name: Type.Optional(Type.String()),
    names: Type.Optional(Type.Array(Type.String(), { maxItems: 100 })),
    seen: Type.Optional(Type.Record(Type.String(), Type.Integer())),
    wait_ms: Type.Optional(Type.Integer({ minimum: 0 })),
    key: Type.Optional(Type.String()),
    value: Type.Optional(Type.String()),
    ttl: Type.Optional(Type.Integer()),
    after: Type.Optional(Type.String()),
    body: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  },
  { additionalProperties: false },
);

/** POST /api/v1/gateway/state: one Queue, Map or Signal operation in the token's workspace. */
export function gatewayStateRoutes(state: StateObjects): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/state",
      {
        config: { access: { needs: "write" } },
        bodyLimit: 4 * 1024 * 1024,
        schema: {
          summary: "One Queue, Map or Signal operation of the workspace (the SDK's); answers its result",
          body: StateBody,
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true) }, { additionalProperties: true })),
        },
      },
      async (req) => {
        const ws = principalOf(req).workspace.id;
        const abort = new AbortController();
        req.raw.once("close", () => abort.abort());
        return { ok: true as const, ...(await state.call(ws, req.body as StateRequest, abort.signal)) };
      },
    );
  };
}

/** The REST inspection routes: /api/v1/queue/{ws}, /api/v1/map/{ws}, /api/v1/signal/{ws}. */
export function stateRoutes(state: StateObjects): FastifyPluginAsync {
  const named = (kind: "queue" | "map" | "signal", p: unknown) =>
    checkObjectName(kind, (p as { name: string }).name);
  return async (app) => {
    app.get(
      "/api/v1/queue/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's non-empty queues with their item counts",
          params: WsParams,
          response: { 200: Type.Object({ queues: Type.Array(Sized) }), ...errors },
        },
      },
      async (req) => ({ queues: await state.queues.list(scopedWorkspace(req).id) }),
    );
    app.get(
      "/api/v1/queue/:ws/:name",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "How many items a queue holds",
          params: NameParams,
          response: { 200: Sized, ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        const name = named("queue", req.params);
        return { name, size: await state.queues.size(ws, name) };
      },
    );
    app.delete(
      "/api/v1/queue/:ws/:name",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Empties a queue; answers how many items it removed",
          params: NameParams,
          response: { 200: Type.Object({ name: Type.String(), deleted: Type.Integer() }), ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        const name = named("queue", req.params);
        return { name, deleted: await state.queues.delete(ws, name) };
      },
    );

    app.get(
      "/api/v1/map/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's non-empty maps with their key counts",
          params: WsParams,
          response: { 200: Type.Object({ maps: Type.Array(Sized) }), ...errors },
        },
      },
      async (req) => ({ maps: await state.maps.list(scopedWorkspace(req).id) }),
    );
    app.get(
      "/api/v1/map/:ws/:name",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The keys of a map (not their values)",
          params: NameParams,
          response: {
            200: Type.Object({ name: Type.String(), size: Type.Integer(), keys: Type.Array(Type.String()) }),
            ...errors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        const name = named("map", req.params);
        const keys = await state.maps.keys(ws, name);
        return { name, size: keys.length, keys };
      },
    );
    app.delete(
      "/api/v1/map/:ws/:name",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Removes every key of a map; answers how many it removed",
          params: NameParams,
          response: { 200: Type.Object({ name: Type.String(), deleted: Type.Integer() }), ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        const name = named("map", req.params);
        return { name, deleted: await state.maps.deleteMap(ws, name) };
      },
    );

    app.get(
      "/api/v1/signal/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's signals that are set now",
          params: WsParams,
          response: { 200: Type.Object({ signals: Type.Array(SignalBody) }), ...errors },
        },
      },
      async (req) => ({ signals: await state.signals.list(scopedWorkspace(req).id) }),
    );
    app.get(
      "/api/v1/signal/:ws/:name",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "One signal: whether it is set, its revision and when it expires",
          params: NameParams,
          response: { 200: SignalBody, ...errors },
        },
      },
      async (req) => state.signals.state(scopedWorkspace(req).id, named("signal", req.params)),
    );
    app.post(
      "/api/v1/signal/:ws/:name/set",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Sets a signal for ttl seconds (default 600)",
          params: NameParams,
          body: Type.Object({ ttl: Type.Optional(Type.Integer()) }, { additionalProperties: false }),
          response: { 200: SignalBody, ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        return state.signals.set(ws, named("signal", req.params), (req.body as { ttl?: number } | null)?.ttl);
      },
    );
    app.post(
      "/api/v1/signal/:ws/:name/clear",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Clears a signal that is set",
          params: NameParams,
          response: { 200: Type.Object({ name: Type.String(), cleared: Type.Boolean() }), ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        const name = named("signal", req.params);
        if (!(await state.signals.clear(ws, name)))
          throw new BerthError("not_found", `signal ${name} is not set`);
        return { name, cleared: true };
      },
    );
  };
}
