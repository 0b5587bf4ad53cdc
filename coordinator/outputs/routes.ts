// `GET /output/{ws}/{id}/{name}?expires=...&sig=...` (docs/outputs.md): an
// Output served without a token while its signed URL is valid; 404 for a
// wrong signature, an expired URL or a deleted output alike.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { OutputStore } from "./output-store.ts";

export function outputPublicRoutes(store: OutputStore): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/output/:ws/:id/:name",
      {
        schema: {
          tags: ["outputs"],
          summary: "An Output's file through its signed public URL (no token)",
          params: Type.Object({ ws: Type.String(), id: Type.String(), name: Type.String() }),
          querystring: Type.Object({ expires: Type.String(), sig: Type.String() }),
        },
      },
      async (req, reply) => {
        const p = req.params as { ws: string; id: string };
        const q = req.query as { expires: string; sig: string };
        const { rec, stream } = await store.openSigned(p.ws, p.id, q.expires, q.sig);
        reply
          .header("content-type", "application/octet-stream")
          .header("content-length", rec.size)
          .header("content-disposition", `attachment; filename*=UTF-8''${encodeURIComponent(rec.name)}`)
          .header("cache-control", "private, no-store");
        return reply.send(stream);
      },
    );
  };
}
