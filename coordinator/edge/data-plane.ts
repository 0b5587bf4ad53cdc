// The data plane on the coordinator's server: the areas' raw routes
// (coordinator/http/raw-routes.ts) take their plain requests before Fastify
// and their upgrades through the server's one upgrade listener, in the order
// the composition root lists them; an upgrade no route takes is answered one
// 404, a plain request no route takes goes on to Fastify.

import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { type EdgeLog, type RawRoute, rawRoutesOf } from "../http/index.ts";

export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * A Fastify serverFactory: the server `create` makes takes `routes`' plain
 * requests before `handler` (Fastify) sees them, and serves their upgrades.
 * `log` is where a route that throws instead of answering is logged.
 */
export function dataPlaneServer(
  create: (handler: RequestHandler) => Server,
  routes: readonly RawRoute[],
  log?: EdgeLog,
): (handler: RequestHandler) => Server {
  return (handler) => {
    const server: Server = create((req, res) => {
      if (!table.takeHttp(req, res)) handler(req, res);
    });
    const table = rawRoutesOf(server, log);
    for (const route of routes) table.add(route);
    return server;
  };
}
