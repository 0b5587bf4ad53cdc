import type { FastifyPluginAsync } from "fastify";
import { Type } from "@sinclair/typebox";
import type { TokenRepo, WorkspaceRepo } from "../store/index.ts";
import type { TokenRecord, Workspace } from "../store/index.ts";
import { principalOf, requireAdmin } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

export const WorkspaceBody = Type.Object({
  external_id: Type.String(),
  name: Type.String(),
  created_at: Type.String({ format: "date-time" }),
});

export const TokenBody = Type.Object({
  id: Type.String(),
  name: Type.String(),
  prefix: Type.String({ description: "first characters of the token, to tell tokens apart" }),
  admin: Type.Boolean(),
  created_at: Type.String(),
  last_used_at: Type.Union([Type.String(), Type.Null()]),
  revoked_at: Type.Union([Type.String(), Type.Null()]),
});

export const workspaceJson = (w: Workspace) => ({
  external_id: w.externalId,
  name: w.name,
  created_at: w.createdAt,
});
export const tokenJson = (t: TokenRecord) => ({
  id: t.id,
  name: t.name,
  prefix: t.prefix,
  admin: t.admin,
  created_at: t.createdAt,
  last_used_at: t.lastUsedAt,
  revoked_at: t.revokedAt,
});

const errors = {
  400: ErrorResponse,
  401: ErrorResponse,
  403: ErrorResponse,
  404: ErrorResponse,
  409: ErrorResponse,
};

/** Workspaces and their tokens. */
export function workspaceRoutes(store: { workspaces: WorkspaceRepo; tokens: TokenRepo }): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/workspace/current",
      { schema: { response: { 200: WorkspaceBody, ...errors } } },
      async (req) => workspaceJson(principalOf(req).workspace),
    );

    app.get(
      "/api/v1/workspace",
      { schema: { response: { 200: Type.Object({ workspaces: Type.Array(WorkspaceBody) }), ...errors } } },
      async (req) => {
        requireAdmin(req);
        return { workspaces: (await store.workspaces.list()).map(workspaceJson) };
      },
    );

    app.post(
      "/api/v1/workspace",
      {
        schema: {
          body: Type.Object(
            { name: Type.String({ minLength: 1, maxLength: 63 }) },
            { additionalProperties: false },
          ),
          response: {
            201: Type.Object({ workspace: WorkspaceBody, token: Type.String(), token_info: TokenBody }),
            ...errors,
          },
        },
      },
      async (req, reply) => {
        requireAdmin(req);
        const { name } = req.body as { name: string };
        const ws = await store.workspaces.create(name);
        const { record, secret } = await store.tokens.create(ws.id, { name: "initial" });
        reply.status(201);
        return { workspace: workspaceJson(ws), token: secret, token_info: tokenJson(record) };
      },
    );

    app.get(
      "/api/v1/token",
      { schema: { response: { 200: Type.Object({ tokens: Type.Array(TokenBody) }), ...errors } } },
      async (req) => ({ tokens: (await store.tokens.list(principalOf(req).workspace.id)).map(tokenJson) }),
    );

    app.post(
      "/api/v1/token",
      {
        schema: {
          body: Type.Optional(
            Type.Object(
              { name: Type.Optional(Type.String({ maxLength: 100 })), admin: Type.Optional(Type.Boolean()) },
              { additionalProperties: false },
            ),
          ),
          response: { 201: Type.Object({ token: Type.String(), token_info: TokenBody }), ...errors },
        },
      },
      async (req, reply) => {
        const p = principalOf(req);
        const body = (req.body ?? {}) as { name?: string; admin?: boolean };
        if (body.admin) requireAdmin(req);
        const { record, secret } = await store.tokens.create(p.workspace.id, {
          ...(body.name !== undefined ? { name: body.name } : {}),
          admin: body.admin === true,
        });
        reply.status(201);
        return { token: secret, token_info: tokenJson(record) };
      },
    );

    app.delete(
      "/api/v1/token/:tokenId",
      {
        schema: {
          params: Type.Object({ tokenId: Type.String() }),
          response: { 200: Type.Object({ token_info: TokenBody }), ...errors },
        },
      },
      async (req) => {
        const { tokenId } = req.params as { tokenId: string };
        return { token_info: tokenJson(await store.tokens.revoke(principalOf(req).workspace.id, tokenId)) };
      },
    );
  };
}
