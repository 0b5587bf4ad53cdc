// The ports area (docs/sandboxes.md, "Exposed ports"): /port/... and
// `{container_id}-{port}.{endpointDomain}` served before Fastify.
import type { Area, AreaRoutes } from "../http/index.ts";
import { exposedPortRoute, PortProxy, type PortProxyDeps } from "./proxy.ts";

export function portsHttpRoutes(ports: PortProxy): AreaRoutes {
  return { raw: [exposedPortRoute(ports)] };
}

export function createPorts(d: PortProxyDeps): Area<PortProxy> {
  const ports = new PortProxy(d);
  return { service: ports, routes: portsHttpRoutes(ports) };
}
