import type { IncomingMessage, ServerResponse } from "node:http";
import type { FastifyPluginAsync } from "fastify";
import { sendError } from "../http/index.ts";
import type { EndpointDispatcher } from "./dispatch.ts";

/**
 * `{base_url}/endpoint/...`: direct-served deployments (docs/deployments.md,
 * Invocation). Bodies are never parsed by Fastify: endpoint bodies are read
 * and checked by the dispatcher, asgi bodies stream to the container as they
 * come. Websockets are attachEndpointUpgrades' (coordinator/endpoints/websocket.ts).
 */
export function endpointRoutes(endpoints: EndpointDispatcher): FastifyPluginAsync {
  return async (app) => {
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    app.all("/endpoint/*", async (req, reply) => {
      reply.hijack();
      await serveEndpointRequest(endpoints, req.raw, reply.raw);
    });
  };
}

/**
 * One /endpoint/... request, start to end; never rejects. The coordinator's
 * server calls it before Fastify sees the request (the hot path skips routing
 * and hooks); the Fastify route above serves inject() and servers built without it.
 */
export async function serveEndpointRequest(
  endpoints: EndpointDispatcher,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  try {
    await endpoints.serveHttp(req, res);
  } catch (e) {
    if (!res.headersSent)
      sendError(res, e, {
        log: endpoints.deps.log,
        what: "endpoint request failed",
        context: { url: req.url },
      });
    else {
      endpoints.deps.log.error({ err: e, url: req.url }, "endpoint request failed");
      res.destroy();
    }
  }
}
