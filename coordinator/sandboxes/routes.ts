// Sandboxes for the SDK (docs/sandboxes.md, Gateway routes): lifecycle, TTL,
// network, ports and snapshots here; processes and files in their own files.
// Every route is scoped to the token's workspace.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { MAX_ALLOW_LIST_ENTRIES } from "../../shared/egress.ts";
import type { SandboxService } from "./service.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { Network, SANDBOXES, SandboxBody, SandboxParams, Urls, sandboxJson } from "./routes-common.ts";
import { gatewaySandboxFileRoutes } from "./file-routes.ts";
import { gatewaySandboxProcessRoutes } from "./process-routes.ts";

const Ok = <T extends Record<string, Parameters<typeof Type.Object>[0][string]>>(props: T) =>
  gatewayResponse(Type.Object({ ok: Type.Literal(true), ...props }));

const Created = {
  sandbox_id: Type.String(),
  container_id: Type.String(),
  stub_id: Type.String(),
  urls: Urls,
  expires_at: Type.Union([Type.String(), Type.Null()]),
};

/** Every sandbox route: these, the process routes and the file routes. */
export function gatewaySandboxRoutes(sandboxes: SandboxService): FastifyPluginAsync {
  return async (app) => {
    await app.register(sandboxLifecycleRoutes(sandboxes));
    await app.register(gatewaySandboxProcessRoutes(sandboxes));
    await app.register(gatewaySandboxFileRoutes(sandboxes));
  };
}

function sandboxLifecycleRoutes(sandboxes: SandboxService): FastifyPluginAsync {
  return async (app) => {
    const ws = (req: { principal: unknown }) => principalOf(req as never).workspace.id;
    const created = (v: Awaited<ReturnType<SandboxService["create"]>>) => ({
      ok: true as const,
      sandbox_id: v.sandboxId,
      container_id: v.sandboxId,
      stub_id: v.stubId,
      urls: v.urls,
      expires_at: v.expiresAt,
    });

    app.post(
      SANDBOXES,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Creates a sandbox from the stub; answers its id and port URLs once its container runs",
          body: Type.Object({ stub_id: Type.String({ minLength: 1 }) }, { additionalProperties: false }),
          response: Ok(Created),
        },
      },
      async (req) => {
        const { stub_id } = req.body as { stub_id: string };
        return created(
          await sandboxes.create(ws(req), stub_id, {
            expect: "sandbox",
            tokenId: principalOf(req).token.id,
          }),
        );
      },
    );

    app.post(
      `${SANDBOXES}/from-memory-snapshot`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Creates a sandbox restored from a memory snapshot, on the agent holding it",
          body: Type.Object({ snapshot_id: Type.String({ minLength: 1 }) }, { additionalProperties: false }),
          response: Ok(Created),
        },
      },
      async (req) => {
        const { snapshot_id } = req.body as { snapshot_id: string };
        return created(
          await sandboxes.createFromMemorySnapshot(ws(req), snapshot_id, principalOf(req).token.id),
        );
      },
    );

    app.get(
      `${SANDBOXES}/:id`,
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "One sandbox (terminated ones too): its status, expiry, URLs and network policy",
          params: SandboxParams,
          response: gatewayResponse(Type.Composite([Type.Object({ ok: Type.Literal(true) }), SandboxBody])),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        return { ok: true as const, ...sandboxJson(await sandboxes.get(ws(req), id)) };
      },
    );

    app.post(
      `${SANDBOXES}/:id/terminate`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Terminates a sandbox: stops and removes its container",
          params: SandboxParams,
          response: Ok({ terminated: Type.Literal(true) }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        return { ok: true as const, terminated: await sandboxes.terminate(ws(req), id) };
      },
    );

    app.post(
      `${SANDBOXES}/:id/ttl`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary:
            "Sets how long a sandbox lives after its last activity (-1: forever); answers when it expires",
          params: SandboxParams,
          body: Type.Object({ ttl_seconds: Type.Integer({ minimum: -1 }) }, { additionalProperties: false }),
          response: Ok({ expires_at: Type.Union([Type.String(), Type.Null()]) }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        const { ttl_seconds } = req.body as { ttl_seconds: number };
        return { ok: true as const, expires_at: await sandboxes.setTtl(ws(req), id, ttl_seconds) };
      },
    );

    app.post(
      `${SANDBOXES}/:id/network`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Changes a sandbox's outbound network policy, applied at once without a restart",
          params: SandboxParams,
          body: Type.Object(
            {
              block_network: Type.Optional(Type.Boolean()),
              // Counted and checked (CIDR notation) by resolveEgressPolicy, whose messages say which entry is wrong.
              allow_list: Type.Optional(
                Type.Union([
                  Type.Array(Type.String({ maxLength: 64 }), { maxItems: MAX_ALLOW_LIST_ENTRIES * 10 }),
                  Type.Null(),
                ]),
              ),
            },
            { additionalProperties: false },
          ),
          response: Ok({ network: Network }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        const b = req.body as { block_network?: boolean; allow_list?: string[] | null };
        return { ok: true as const, network: await sandboxes.updateNetwork(ws(req), id, b) };
      },
    );

    app.post(
      `${SANDBOXES}/:id/ports`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Exposes a port of a running sandbox; answers its public URL",
          params: SandboxParams,
          body: Type.Object(
            { port: Type.Integer({ minimum: 1, maximum: 65535 }) },
            { additionalProperties: false },
          ),
          response: Ok({ port: Type.Integer(), url: Type.String() }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        const { port } = req.body as { port: number };
        return { ok: true as const, ...(await sandboxes.exposePort(ws(req), id, port)) };
      },
    );

    app.get(
      `${SANDBOXES}/:id/ports`,
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The public URLs of a sandbox's exposed ports, by port",
          params: SandboxParams,
          response: Ok({ urls: Urls }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        return { ok: true as const, urls: await sandboxes.urls(ws(req), id) };
      },
    );

    app.post(
      `${SANDBOXES}/:id/snapshots/filesystem`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Snapshots a sandbox's filesystem as an image; answers its image id",
          params: SandboxParams,
          response: Ok({ image_id: Type.String() }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        return { ok: true as const, image_id: await sandboxes.snapshotFilesystem(ws(req), id) };
      },
    );

    app.post(
      `${SANDBOXES}/:id/snapshots/memory`,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Checkpoints a sandbox's memory (CRIU); answers the snapshot id to restore from",
          params: SandboxParams,
          response: Ok({ snapshot_id: Type.String() }),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        return { ok: true as const, snapshot_id: await sandboxes.snapshotMemory(ws(req), id) };
      },
    );
  };
}
