import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";

/** Public liveness route for load balancers and `berth up`. */
export function healthRoutes(version: string): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/healthz",
      {
        schema: {
          summary: "Liveness: answers ok and the coordinator's version",
          response: { 200: Type.Object({ ok: Type.Boolean(), version: Type.String() }) },
        },
      },
      async () => ({ ok: true, version }),
    );
  };
}
