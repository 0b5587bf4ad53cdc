import { timingSafeEqual } from "node:crypto";
import type { FastifyPluginAsync } from "fastify";
import fp from "fastify-plugin";
import { BerthError } from "../../shared/errors.ts";
import type { CoordinatorMetrics } from "./index.ts";
import { bearerToken } from "../http/index.ts";

// `GET /metrics` in Prometheus text format, outside /api/v1, and the hook
// that counts every answered request. The plugin is not encapsulated
// (fastify-plugin), so its onResponse hook sees the routes of every other
// plugin. /endpoint/... requests never reach Fastify, so they cost nothing here.

export interface PrometheusRouteDeps {
  metrics: CoordinatorMetrics;
  /** When set, scrapes must send `Authorization: Bearer <token>`. @default open */
  token?: string;
}

function sameToken(given: string, want: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(want);
  return a.length === b.length && timingSafeEqual(a, b);
}

export function prometheusRoutes(d: PrometheusRouteDeps): FastifyPluginAsync {
  return fp(async (app) => {
    app.addHook("onResponse", async (req, reply) => {
      // The route's pattern keeps the label set bounded; unmatched URLs share one value.
      const route = req.routeOptions.url ?? "unmatched";
      d.metrics.observeRequest(req.method, route, reply.statusCode, reply.elapsedTime / 1000);
    });

    app.get("/metrics", { schema: { hide: true } }, async (req, reply) => {
      if (d.token !== undefined && !sameToken(bearerToken(req.headers.authorization), d.token)) {
        throw new BerthError("unauthenticated", "wrong metrics token");
      }
      const { contentType, body } = await d.metrics.render();
      reply.type(contentType);
      return body;
    });
  });
}
