// The one Fastify configuration: the coordinator's app (coordinator/edge/app.ts)
// and the tests that mount a few routes both make their instance here, so a
// route under test meets the body limit, validator options, principal and
// error mapping it meets in production.

import type { IncomingMessage, Server } from "node:http";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { Logger } from "pino";
import { DEFAULT_BODY_LIMIT } from "./body-limits.ts";
import { installErrorHandlers } from "./errors.ts";
import { publicError } from "./public-error.ts";

export interface FastifyOptions {
  /** The request log; false for none. @default false */
  logger?: Logger | false;
  /** Rewrites a request's URL before routing (per-deployment host names). */
  rewriteUrl?: (req: IncomingMessage) => string;
  /** Makes the server (HTTPS, requests served before Fastify). @default Fastify's own node:http server */
  serverFactory?: (
    handler: (req: IncomingMessage, res: import("node:http").ServerResponse) => void,
  ) => Server;
  /** Only read by Fastify to say "https://" in its listening line. */
  https?: { cert: string | Buffer; key: string | Buffer };
}

export function createFastify(o: FastifyOptions = {}): FastifyInstance {
  const common = {
    bodyLimit: DEFAULT_BODY_LIMIT,
    // Requests Fastify refuses before routing (a bad %-escape, a path parameter past maxParamLength)
    // get the catalog's error shape too, not Fastify's own.
    frameworkErrors: (err: Error, req: FastifyRequest, reply: FastifyReply) => {
      const pe = publicError(err, { log: req.log });
      reply.status(pe.status).headers(pe.headers).send(pe.body);
    },
    // Per-request lines would drown the log; errors are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    ajv: { customOptions: { removeAdditional: false as const, coerceTypes: "array" as const } },
    ...(o.rewriteUrl ? { rewriteUrl: o.rewriteUrl } : {}),
    ...(o.https ? { https: o.https } : {}),
    ...(o.serverFactory ? { serverFactory: o.serverFactory } : {}),
  };
  const app: FastifyInstance = o.logger
    ? Fastify({ ...common, loggerInstance: o.logger as FastifyBaseLogger })
    : Fastify({ ...common, logger: false });
  app.decorateRequest("principal", null);
  installErrorHandlers(app);
  return app;
}
