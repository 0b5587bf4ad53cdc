import type { FastifyPluginAsync } from "fastify";
import type { EndpointDispatcher } from "../../endpoints/dispatch.ts";
import { writeJson } from "../../endpoints/proxy.ts";

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
    const serve = async (
      req: { raw: import("node:http").IncomingMessage },
      reply: import("fastify").FastifyReply,
    ) => {
      reply.hijack();
      try {
        await endpoints.serveHttp(req.raw, reply.raw);
      } catch (e) {
        endpoints.deps.log.error({ err: (e as Error).message, url: req.raw.url }, "endpoint request failed");
        if (!reply.raw.headersSent)
          writeJson(reply.raw, 500, { error: { code: "internal", message: "internal error" } });
        else reply.raw.destroy();
      }
    };
    app.all("/endpoint/*", serve);
  };
}
