// The coordinator's HTTP app with the areas every coordinator serves (the
// fleet, workspaces and metrics routes) over a store, plus `areas`: what the
// tests of one area mount. Built by the edge's one buildHttpApp.

import type { FastifyInstance } from "fastify";
import { buildHttpApp, type HttpAppOptions } from "../../coordinator/edge/index.ts";
import {
  type AgentRevoker,
  type FleetView,
  fleetHttpRoutes,
  type JoinService,
} from "../../coordinator/fleet/index.ts";
import type { AreaRoutes } from "../../coordinator/http/index.ts";
import { metricsHttpRoutes } from "../../coordinator/metrics/index.ts";
import type { Store } from "../../coordinator/records.ts";
import { workspacesHttpRoutes } from "../../coordinator/workspaces/index.ts";

export async function bareHttpApp(o: {
  store: Store;
  fleet: FleetView;
  join: JoinService;
  revoker?: AgentRevoker;
  areas?: AreaRoutes[];
  tls?: HttpAppOptions["tls"];
  endpointDomain?: string;
}): Promise<FastifyInstance> {
  const { store } = o;
  const routes: AreaRoutes[] = [
    fleetHttpRoutes({ store, view: o.fleet, join: o.join, ...(o.revoker ? { revoker: o.revoker } : {}) }),
    workspacesHttpRoutes(store),
    metricsHttpRoutes({ metrics: store.metrics, stubs: store.stubs }),
    ...(o.areas ?? []),
  ];
  return buildHttpApp({
    areas: routes.map((r) => ({ routes: r })),
    tokens: store.tokens,
    logger: false,
    version: "test",
    ...(o.tls ? { tls: o.tls } : {}),
    ...(o.endpointDomain ? { endpointDomain: o.endpointDomain } : {}),
  });
}
