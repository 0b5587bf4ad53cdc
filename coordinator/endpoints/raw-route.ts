// The endpoints' raw route (coordinator/http/raw-routes.ts): /endpoint/...
// requests and websockets, taken before Fastify. The invocation path is the
// hot one (its added-latency budget is 2 ms) and needs none of Fastify's
// routing, hooks or body parsing.

import type { IncomingMessage } from "node:http";
import type { RawRoute } from "../http/index.ts";
import type { EndpointDispatcher } from "./dispatch.ts";
import { rewriteEndpointHost } from "./host-names.ts";
import { serveEndpointRequest } from "./routes.ts";
import { serveEndpointUpgrade } from "./websocket.ts";

/**
 * `/endpoint/...`, and with `endpointDomain` a deployment's host name
 * `{deployment_id}.{endpointDomain}` (rewritten to `/endpoint/id/...` first,
 * so one path serves both). Put it before routes that read host names (exposed ports).
 */
export function endpointRoute(endpoints: EndpointDispatcher, o: { endpointDomain?: string } = {}): RawRoute {
  const isEndpoint = (req: IncomingMessage) =>
    (o.endpointDomain ? rewriteEndpointHost(o.endpointDomain, req) : (req.url ?? "/")).startsWith(
      "/endpoint/",
    );
  return {
    name: "endpoints",
    takeHttp(req, res) {
      if (!isEndpoint(req)) return false;
      void serveEndpointRequest(endpoints, req, res);
      return true;
    },
    takeUpgrade(req, socket, head) {
      if (!isEndpoint(req)) return false;
      serveEndpointUpgrade(endpoints, req, socket, head);
      return true;
    },
  };
}
