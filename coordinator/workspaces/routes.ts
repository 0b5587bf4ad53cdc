import type { FastifyPluginAsync } from "fastify";
import { Type } from "@sinclair/typebox";
import type { TokenRepo, WorkspaceRepo } from "../store/index.ts";
import type { TokenRecord, Workspace } from "../store/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { ROLES, principalOf, requireAdmin, roleCovers } from "../http/index.ts";
import type { Role } from "../store/index.ts";
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
  admin: Type.Boolean({ description: "a cluster admin token (fleet, agents, join tokens, workspaces)" }),
  role: Type.Union(
    ROLES.map((r) => Type.Literal(r)),
    { description: "what the token may do in its workspace (docs/roles.md)" },
  ),
  deployments: Type.Union([Type.Array(Type.String()), Type.Null()], {
    description: "the deployment names the token is narrowed to; null for all",
  }),
  created_at: Type.String(),
  last_used_at: Type.Union([Type.String(), Type.Null()]),
  revoked_at: Type.Union([Type.String(), Type.Null()]),
  kind: Type.Union([Type.Literal("token"), Type.Literal("session")], {
    description: "an API token, or a single sign-on session (docs/sso.md)",
  }),
  expires_at: Type.Union([Type.String(), Type.Null()], {
    description: "a session's expiry; null for tokens",
  }),
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
  role: t.role,
  deployments: t.deployments,
  created_at: t.createdAt,
  last_used_at: t.lastUsedAt,
  revoked_at: t.revokedAt,
  kind: t.kind,
  expires_at: t.expiresAt,
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
      {
        config: { access: { needs: "token" } },
        schema: {
          summary: "The workspace of the calling token",
          response: { 200: WorkspaceBody, ...errors },
        },
      },
      async (req) => workspaceJson(principalOf(req).workspace),
    );

    app.get(
      "/api/v1/workspace",
      {
        config: { access: { needs: "cluster" } },
        schema: {
          summary: "Every workspace of the cluster",
          response: { 200: Type.Object({ workspaces: Type.Array(WorkspaceBody) }), ...errors },
        },
      },
      async () => {
        return { workspaces: (await store.workspaces.list()).map(workspaceJson) };
      },
    );

    app.post(
      "/api/v1/workspace",
      {
        config: { access: { needs: "cluster", audit: "workspace.create" } },
        schema: {
          summary: "Creates a workspace; answers it and its first admin token, shown this once",
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
        const { name } = req.body as { name: string };
        const ws = await store.workspaces.create(name);
        const { record, secret } = await store.tokens.create(ws.id, { name: "initial", role: "admin" });
        reply.status(201);
        return { workspace: workspaceJson(ws), token: secret, token_info: tokenJson(record) };
      },
    );

    app.get(
      "/api/v1/token",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's API tokens, revoked ones included (never their secrets)",
          response: { 200: Type.Object({ tokens: Type.Array(TokenBody) }), ...errors },
        },
      },
      async (req) => ({ tokens: (await store.tokens.list(principalOf(req).workspace.id)).map(tokenJson) }),
    );

    app.post(
      "/api/v1/token",
      {
        config: { access: { needs: "write", audit: "token.create" } },
        schema: {
          summary:
            "Creates a token of the workspace, at most as strong as the caller's; answers its secret, shown this once",
          body: Type.Optional(
            Type.Object(
              {
                name: Type.Optional(Type.String({ maxLength: 100 })),
                admin: Type.Optional(
                  Type.Boolean({ description: "a cluster admin token (needs one); its role is admin" }),
                ),
                role: Type.Optional(
                  Type.Union(
                    ROLES.map((r) => Type.Literal(r)),
                    { description: "default developer; at most the caller's own role" },
                  ),
                ),
                deployments: Type.Optional(
                  Type.Array(Type.String({ minLength: 1, maxLength: 63 }), {
                    minItems: 1,
                    maxItems: 100,
                    description: "narrow the token to these deployment names (the token a web app embeds)",
                  }),
                ),
              },
              { additionalProperties: false },
            ),
          ),
          response: { 201: Type.Object({ token: Type.String(), token_info: TokenBody }), ...errors },
        },
      },
      async (req, reply) => {
        const p = principalOf(req);
        const body = (req.body ?? {}) as {
          name?: string;
          admin?: boolean;
          role?: Role;
          deployments?: string[];
        };
        if (body.admin) requireAdmin(req);
        const role = body.role ?? (body.admin ? "admin" : "developer");
        // A token makes no token stronger than itself.
        if (!roleCovers(p.token.role, role)) {
          throw new BerthError(
            "permission_denied",
            `a ${p.token.role} token cannot make a ${role} token; only admin tokens manage admin tokens`,
          );
        }
        const { record, secret } = await store.tokens.create(p.workspace.id, {
          ...(body.name !== undefined ? { name: body.name } : {}),
          admin: body.admin === true,
          role,
          ...(body.deployments !== undefined ? { deployments: body.deployments } : {}),
        });
        reply.status(201);
        return { token: secret, token_info: tokenJson(record) };
      },
    );

    app.delete(
      "/api/v1/token/:tokenId",
      {
        config: { access: { needs: "write", audit: "token.revoke" } },
        schema: {
          summary: "Revokes a token of the workspace; answers the revoked token",
          params: Type.Object({ tokenId: Type.String() }),
          response: { 200: Type.Object({ token_info: TokenBody }), ...errors },
        },
      },
      async (req) => {
        const { tokenId } = req.params as { tokenId: string };
        const p = principalOf(req);
        return { token_info: tokenJson(await store.tokens.revoke(p.workspace.id, tokenId, p.token)) };
      },
    );
  };
}
