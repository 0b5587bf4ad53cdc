// Managed databases (docs/databases.md): the spec's `GET/POST /database/{ws}`
// (list, create), and per database get, start, stop, restart and delete.
// Bodies and answers never carry the password: it lives only in the
// workspace secret the answer names.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { DatabaseService } from "./index.ts";
import { ErrorResponse } from "../http/index.ts";
import { scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";

const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);

export const DatabaseBody = Type.Object({
  id: Type.String(),
  name: Type.String(),
  engine: Type.String({ description: "postgres or redis" }),
  status: Type.String({ description: "starting, running, stopped or failed" }),
  secret_name: Type.String({ description: "the workspace secret holding the connection URL" }),
  volume: Type.String({ description: "the workspace volume holding the data" }),
  host: Type.String({ description: "where functions reach it inside their own container" }),
  local_port: Type.Integer(),
  port: Type.Integer({ description: "the server's port inside its pod" }),
  pod_id: Nullable(Type.String()),
  agent_id: Nullable(Type.String()),
  error: Type.String({ description: "why the last start failed; empty otherwise" }),
  created_at: Type.String({ format: "date-time" }),
  updated_at: Type.String({ format: "date-time" }),
});

// Engine, name and sizes are checked by the service, whose messages say what is wrong.
const CreateBody = Type.Object(
  {
    engine: Type.String({ description: "postgres or redis" }),
    name: Type.String({ description: "1-40 lower-case letters, digits or '-', starting with a letter" }),
    cpu: Type.Optional(Type.Number({ description: "CPU cores of the pod (default 1)" })),
    memory: Type.Optional(Type.Integer({ description: "memory of the pod in MiB (default 1024)" })),
  },
  { additionalProperties: false },
);

const NameParams = Type.Object({ ws: WsParams.properties.ws, name: Type.String() });
const errors = { ...WorkspaceErrors, 409: ErrorResponse, 503: ErrorResponse };

export function databaseRoutes(dbs: DatabaseService): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/database/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["databases"],
          summary: "The workspace's databases",
          params: WsParams,
          response: { 200: Type.Object({ databases: Type.Array(DatabaseBody) }), ...errors },
        },
      },
      async (req) => ({ databases: await dbs.list(scopedWorkspace(req).id) }),
    );

    app.post(
      "/api/v1/database/:ws",
      {
        config: { access: { needs: "write", audit: "database.create" } },
        schema: {
          tags: ["databases"],
          summary: "Create a PostgreSQL or Redis database; answers once it is ready",
          params: WsParams,
          body: CreateBody,
          response: { 201: DatabaseBody, ...errors },
        },
      },
      async (req, reply) => {
        const ws = scopedWorkspace(req).id;
        const created = await dbs.create(ws, req.body as { engine: string; name: string });
        reply.status(201);
        return created;
      },
    );

    app.get(
      "/api/v1/database/:ws/:name",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["databases"],
          summary: "One database: its status, where it is reached and the secret with its URL",
          params: NameParams,
          response: { 200: DatabaseBody, ...errors },
        },
      },
      async (req) => dbs.get(scopedWorkspace(req).id, (req.params as { name: string }).name),
    );

    for (const action of ["start", "stop", "restart"] as const) {
      app.post(
        `/api/v1/database/:ws/:name/${action}`,
        {
          config: { access: { needs: "write", audit: `database.${action}` } },
          schema: {
            tags: ["databases"],
            summary:
              action === "stop"
                ? "Stop the database's pod; its data stays"
                : `${action === "start" ? "Start" : "Restart"} the database; answers once it is ready`,
            params: NameParams,
            response: { 200: DatabaseBody, ...errors },
          },
        },
        async (req) => dbs[action](scopedWorkspace(req).id, (req.params as { name: string }).name),
      );
    }

    app.delete(
      "/api/v1/database/:ws/:name",
      {
        config: { access: { needs: "write", audit: "database.delete" } },
        schema: {
          tags: ["databases"],
          summary: "Delete the database; its volume and secret stay unless delete_data=true",
          params: NameParams,
          querystring: Type.Object({ delete_data: Type.Optional(Type.Boolean()) }),
          response: { 200: Type.Object({ deleted: Type.Boolean() }), ...errors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req).id;
        const { delete_data } = req.query as { delete_data?: boolean };
        await dbs.delete(ws, (req.params as { name: string }).name, { deleteData: delete_data === true });
        return { deleted: true };
      },
    );
  };
}
