// The API's OpenAPI 3.1 document, made by @fastify/swagger from the routes'
// TypeBox schemas and served (without a token) at GET /api/v1/openapi.json.
// Routes that declare no tags get one from their path, and public routes are
// marked as needing no token, so every plugin's routes land in the document
// without each plugin knowing about it.

import swagger from "@fastify/swagger";
import type { FastifyInstance, FastifySchema } from "fastify";
import { type RouteAccess, rolesWith } from "../http/index.ts";

export const OPENAPI_PATH = "/api/v1/openapi.json";

/** Routes that take no workspace token (health, agent join and resume with their own proofs, signed output URLs, this document). */
const PUBLIC_ROUTES = new Set([
  "/healthz",
  "/api/v1/agents/join",
  "/api/v1/agents/resume",
  "/api/v1/agents/ca",
  "/output/:ws/:id/:name",
  OPENAPI_PATH,
]);

/** The tag of a route without its own: the area its path names. */
export function tagOf(url: string): string {
  const parts = url.split("/").filter(Boolean);
  if (parts[0] === "api" && parts[1] === "v1") return parts[2] ?? "api";
  if (parts[0] === "v2" && parts[1] === "task") return "tasks";
  return parts[0] ?? "api";
}

/**
 * What a route needs of the caller's token, as extensions of its operation
 * (docs/roles.md): `x-berth-role` lists the roles whose tokens may call it
 * (["cluster-admin"] for the cluster admin's routes), `x-berth-access` the
 * capability, `x-berth-deployment` whether a token narrowed to deployments
 * may, and `x-berth-audit` the audit trail's action for a change.
 */
export function accessExtensions(access: RouteAccess | undefined): Record<string, unknown> {
  if (!access) return {};
  return {
    "x-berth-access": access.needs,
    "x-berth-role": access.needs === "cluster" ? ["cluster-admin"] : rolesWith(access.needs),
    ...(access.deployment ? { "x-berth-deployment": true } : {}),
    ...(access.audit ? { "x-berth-audit": access.audit } : {}),
  };
}

/**
 * Registers the document generator. Call it before any route plugin: it
 * hears routes as they are added.
 */
export async function registerOpenApi(app: FastifyInstance, version: string): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: {
        title: "berth API",
        version,
        description:
          "The coordinator's public HTTP API: the workspace REST API under /api/v1, the SDK gateway under /api/v1/gateway and the task status API under /v2. See docs/api.md.",
        license: { name: "Apache-2.0", identifier: "Apache-2.0" },
      },
      components: {
        securitySchemes: {
          bearerAuth: {
            type: "http",
            scheme: "bearer",
            description: "a workspace token: `Authorization: Bearer <token>`",
          },
        },
      },
      security: [{ bearerAuth: [] }],
    },
    transform: ({ schema, url, route }) => {
      const s = (schema ?? {}) as FastifySchema & { tags?: string[]; hide?: boolean; security?: unknown };
      // The body limit of each route that takes one (docs/api-limits.md), for clients and the route fuzzer.
      const bodyLimit =
        s.body || (route.method !== "GET" && route.method !== "HEAD")
          ? { "x-body-limit": route.bodyLimit ?? app.initialConfig.bodyLimit }
          : {};
      // Catch-alls (the endpoint proxy) have no fixed shape to document.
      if (url.includes("*")) return { schema: { ...s, hide: true }, url };
      return {
        schema: {
          ...s,
          tags: s.tags && s.tags.length > 0 ? s.tags : [tagOf(url)],
          ...bodyLimit,
          ...accessExtensions(route.config?.access),
          ...(PUBLIC_ROUTES.has(url) ? { security: [] } : {}),
        } as FastifySchema,
        url,
      };
    },
  });
  app.get(OPENAPI_PATH, { schema: { hide: true } }, async () => app.swagger());
}
