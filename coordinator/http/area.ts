// What every coordinator area's factory returns (`create<Area>(deps)`, exported by
// its index.ts): the service other areas use, the routes it serves, and how it
// starts and stops. The composition root (coordinator/main.ts) builds the
// areas in order on one lifecycle stack; the edge (coordinator/edge/app.ts)
// mounts their routes by where each route belongs. The type lives here, in
// the lowest tier, so that every area can return it without importing the edge.

import type { FastifyPluginAsync } from "fastify";
import type { RawRoute } from "./raw-routes.ts";

/** An area's HTTP routes, by where the edge mounts them. */
export interface AreaRoutes {
  /** On the root before every other route: hooks that see every request (the Prometheus counters). */
  hooks?: FastifyPluginAsync[];
  /** No token, or a check of their own (join, public output URLs, /v1, the log stream). */
  public?: FastifyPluginAsync[];
  /** The token-authenticated API (/api/v1/..., /v2/task): one token hook for all of it (http/scopes.ts). */
  api?: FastifyPluginAsync[];
  /** The SDK's gateway (/api/v1/gateway/...): a token, and failures as 200 with ok:false. */
  gateway?: FastifyPluginAsync[];
  /** Served before Fastify (edge/data-plane.ts), asked in the order the areas are listed. */
  raw?: RawRoute[];
}

/** One coordinator area, as its factory builds it. */
export interface Area<Service> {
  /** What other areas and the composition root use. */
  readonly service: Service;
  readonly routes: AreaRoutes;
  /** Starts what runs in the background (loops, subscriptions); a start that fails undoes its own half. */
  start?(): Promise<void> | void;
  /** Stops it; called once, in reverse order of starting. */
  stop?(): Promise<void> | void;
}

/** The routes of `areas`, one list per mount point, in the areas' order. */
export function routesOf(areas: readonly { routes: AreaRoutes }[]): Required<AreaRoutes> {
  const all: Required<AreaRoutes> = { hooks: [], public: [], api: [], gateway: [], raw: [] };
  for (const { routes } of areas) {
    all.hooks.push(...(routes.hooks ?? []));
    all.public.push(...(routes.public ?? []));
    all.api.push(...(routes.api ?? []));
    all.gateway.push(...(routes.gateway ?? []));
    all.raw.push(...(routes.raw ?? []));
  }
  return all;
}
