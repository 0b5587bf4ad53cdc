// Pods for the SDK (docs/sandboxes.md, Pods): `Pod(...).create()` starts one
// container running the pod's entrypoint and answers once it runs. The pod is
// then a sandbox record: GET and terminate under /sandboxes/{id} work on it.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { SandboxService } from "./service.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { Urls } from "./routes-common.ts";

export function gatewayPodRoutes(sandboxes: SandboxService): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/pods",
      {
        schema: {
          body: Type.Object(
            {
              stub_id: Type.String({ minLength: 1 }),
              entrypoint: Type.Optional(
                Type.Union([Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 256 }), Type.Null()]),
              ),
            },
            { additionalProperties: false },
          ),
          response: gatewayResponse(
            Type.Object({
              ok: Type.Literal(true),
              container_id: Type.String(),
              url: Type.Union([Type.String(), Type.Null()]),
              urls: Urls,
            }),
          ),
        },
      },
      async (req) => {
        const b = req.body as { stub_id: string; entrypoint?: string[] | null };
        const v = await sandboxes.create(principalOf(req).workspace.id, b.stub_id, {
          expect: "pod",
          ...(b.entrypoint && b.entrypoint.length > 0 ? { entrypoint: b.entrypoint } : {}),
        });
        // `url`: the first port the pod lists; `urls`: every port's.
        const first = v.ports[0];
        const url = first === undefined ? null : (v.urls[String(first)] ?? null);
        return { ok: true as const, container_id: v.sandboxId, url, urls: v.urls };
      },
    );
  };
}
