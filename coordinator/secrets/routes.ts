import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { SecretInfo, Secrets } from "./index.ts";
import { principalOf } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

// Workspace secrets. A value goes in with POST or PUT and never comes back
// out of this API: it reaches only the environment of the stub's containers.

export const SecretBody = Type.Object({
  name: Type.String(),
  created_at: Type.String({ format: "date-time" }),
  updated_at: Type.String({ format: "date-time" }),
});

const secretJson = (s: SecretInfo) => ({ name: s.name, created_at: s.createdAt, updated_at: s.updatedAt });

const errors = {
  400: ErrorResponse,
  401: ErrorResponse,
  403: ErrorResponse,
  404: ErrorResponse,
  409: ErrorResponse,
};
const WsParams = Type.Object({ ws: Type.String() });
const NameParams = Type.Object({ ws: Type.String(), name: Type.String() });
// Names and values are checked by the service, whose messages say what is wrong.
const Value = Type.String({ description: "UTF-8 text, at most 64 KiB; never returned" });

/** `{ws}` is the caller's own workspace (external id); any other reads as not found. */
function workspaceOf(req: FastifyRequest): string {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return workspace.id;
}

/** `/api/v1/secret/{ws}`: list, create, update and delete the workspace's secrets. */
export function secretRoutes(secrets: Secrets): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/secret/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's secrets by name, without their values",
          params: WsParams,
          response: { 200: Type.Object({ secrets: Type.Array(SecretBody) }), ...errors },
        },
      },
      async (req) => ({ secrets: (await secrets.list(workspaceOf(req))).map(secretJson) }),
    );

    app.post(
      "/api/v1/secret/:ws",
      {
        config: { access: { needs: "write", audit: "secret.create" } },
        schema: {
          summary: "Creates a secret (409 when the name exists); its value is stored encrypted",
          params: WsParams,
          body: Type.Object({ name: Type.String(), value: Value }, { additionalProperties: false }),
          response: { 201: SecretBody, ...errors },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        const { name, value } = req.body as { name: string; value: string };
        const created = await secrets.create(ws, name, value);
        reply.status(201);
        return secretJson(created);
      },
    );

    app.put(
      "/api/v1/secret/:ws/:name",
      {
        config: { access: { needs: "write", audit: "secret.update" } },
        schema: {
          summary: "Replaces the value of a secret",
          params: NameParams,
          body: Type.Object({ value: Value }, { additionalProperties: false }),
          response: { 200: SecretBody, ...errors },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        const { name } = req.params as { name: string };
        const { value } = req.body as { value: string };
        return secretJson(await secrets.update(ws, name, value));
      },
    );

    app.delete(
      "/api/v1/secret/:ws/:name",
      {
        config: { access: { needs: "write", audit: "secret.delete" } },
        schema: {
          summary: "Deletes a secret",
          params: NameParams,
          response: { 204: Type.Null(), ...errors },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        const { name } = req.params as { name: string };
        await secrets.delete(ws, name);
        reply.status(204).send();
      },
    );
  };
}
