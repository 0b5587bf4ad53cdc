import type { Readable } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { MAX_OBJECT_BYTES } from "./blob-store.ts";
import type { Objects } from "./objects.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";

const Params = Type.Object({ sha256: Type.String({ pattern: "^[0-9a-f]{64}$" }) });

/** Content-addressed uploads (the SDK's code archives). */
export function gatewayObjectRoutes(objects: Objects): FastifyPluginAsync {
  return async (app) => {
    // The body goes to disk as it arrives, hashed on the way; it is never buffered whole.
    app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));

    app.get(
      "/api/v1/gateway/objects/:sha256",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "Whether the workspace has the object with this SHA-256, and its id",
          params: Params,
          response: gatewayResponse(
            Type.Object({
              ok: Type.Literal(true),
              exists: Type.Boolean(),
              object_id: Type.Optional(Type.Integer()),
            }),
          ),
        },
      },
      async (req) => {
        const { sha256 } = req.params as { sha256: string };
        const rec = await objects.find(principalOf(req).workspace.id, sha256);
        return rec
          ? { ok: true as const, exists: true, object_id: rec.id }
          : { ok: true as const, exists: false };
      },
    );

    app.put(
      "/api/v1/gateway/objects/:sha256",
      {
        config: { access: { needs: "write" } },
        bodyLimit: MAX_OBJECT_BYTES,
        schema: {
          summary:
            "Uploads an object (a code archive) stored by its SHA-256, which the bytes must match; answers its id",
          params: Params,
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true), object_id: Type.Integer() })),
        },
      },
      async (req) => {
        const { sha256 } = req.params as { sha256: string };
        const length = Number(req.headers["content-length"] ?? 0);
        if (length > MAX_OBJECT_BYTES) {
          throw new BerthError("object_too_large", `the object is ${length} bytes; the limit is 256 MiB`);
        }
        const body = req.body as Readable | undefined;
        if (!body || typeof (body as Readable).pipe !== "function") {
          throw new BerthError(
            "invalid_request",
            "send the object's bytes with Content-Type: application/octet-stream",
          );
        }
        const rec = await objects.put(principalOf(req).workspace.id, sha256, body);
        return { ok: true as const, object_id: rec.id };
      },
    );
  };
}
