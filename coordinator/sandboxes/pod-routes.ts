// Pods for the SDK (docs/sandboxes.md, Pods): `Pod(...).create()` starts one
// container running the pod's entrypoint and answers once it runs, or once it
// finished (an entrypoint that exits 0 at once: status terminated, exit_code
// 0). The pod is then a sandbox record: GET /pods/{id} (and /sandboxes/{id})
// read its status and exit code; terminate under /sandboxes/{id} ends it.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { SandboxService } from "./service.ts";
import type { SandboxView } from "./types.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { SandboxBody, SandboxParams, Urls, sandboxJson } from "./routes-common.ts";

const PODS = "/api/v1/gateway/pods";

const Status = Type.Union([Type.Literal("starting"), Type.Literal("running"), Type.Literal("terminated")]);

/** `url`: the first port the pod lists; `urls`: every port's. */
function firstUrl(v: SandboxView): string | null {
  const first = v.ports[0];
  return first === undefined ? null : (v.urls[String(first)] ?? null);
}

export function gatewayPodRoutes(sandboxes: SandboxService): FastifyPluginAsync {
  return async (app) => {
    app.post(
      PODS,
      {
        config: { access: { needs: "write" } },
        schema: {
          summary:
            "Starts a pod from the stub; answers its container id and URLs once it runs, or once it finished",
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
              status: Status,
              exit_code: Type.Union([Type.Integer(), Type.Null()]),
            }),
          ),
        },
      },
      async (req) => {
        const b = req.body as { stub_id: string; entrypoint?: string[] | null };
        const v = await sandboxes.create(principalOf(req).workspace.id, b.stub_id, {
          expect: "pod",
          ...(b.entrypoint && b.entrypoint.length > 0 ? { entrypoint: b.entrypoint } : {}),
          tokenId: principalOf(req).token.id,
        });
        return {
          ok: true as const,
          container_id: v.sandboxId,
          url: firstUrl(v),
          urls: v.urls,
          status: v.status,
          exit_code: v.exitCode,
        };
      },
    );

    app.get(
      `${PODS}/:id`,
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "One pod: its status, exit code and URLs",
          params: SandboxParams,
          response: gatewayResponse(
            Type.Composite([
              Type.Object({ ok: Type.Literal(true), url: Type.Union([Type.String(), Type.Null()]) }),
              SandboxBody,
            ]),
          ),
        },
      },
      async (req) => {
        const { id } = req.params as { id: string };
        const v = await sandboxes.get(principalOf(req).workspace.id, id);
        // A sandbox's id is not a pod's: the same 404 as an unknown id.
        if (v.kind !== "pod") throw new BerthError("not_found", `pod ${id} not found`, { container_id: id });
        return { ok: true as const, url: firstUrl(v), ...sandboxJson(v) };
      },
    );
  };
}
