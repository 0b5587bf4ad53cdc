// The endpoints area (docs/deployments.md): /endpoint/... requests to
// deployed endpoints and ASGI apps, served before Fastify (the hot path), and
// the routes that remain Fastify's.
import type { Area, AreaRoutes } from "../http/index.ts";
import { EndpointDispatcher } from "./dispatch.ts";
import { endpointRoute } from "./raw-route.ts";
import { endpointRoutes } from "./routes.ts";
import type { EndpointDeps } from "./types.ts";

export function endpointsHttpRoutes(
  endpoints: EndpointDispatcher,
  o: { endpointDomain?: string } = {},
): AreaRoutes {
  return { public: [endpointRoutes(endpoints)], raw: [endpointRoute(endpoints, o)] };
}

export interface EndpointsDeps extends EndpointDeps {
  /** Per-deployment host names `{deployment_id}.{endpointDomain}` (coordinator option). */
  endpointDomain?: string;
}

export function createEndpoints(d: EndpointsDeps): Area<EndpointDispatcher> {
  const { endpointDomain, ...deps } = d;
  const endpoints = new EndpointDispatcher(deps);
  return {
    service: endpoints,
    routes: endpointsHttpRoutes(endpoints, endpointDomain ? { endpointDomain } : {}),
    stop: () => endpoints.close(),
  };
}
