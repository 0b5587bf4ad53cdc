import type { FastifyInstance } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { publicError } from "../edge/errors.ts";

// Fastify's side of the public error edge (coordinator/edge/errors.ts): every
// error response has the body { error: { code, message, details? } } with a
// code from CATALOG; an internal error's text stays in the log.

export { HTTP_STATUS, toBerthError } from "../edge/errors.ts";

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err, req, reply) => {
    const pe = publicError(err, { log: req.log });
    if (pe.status >= 500 && !pe.errorId) req.log.error({ err }, "request failed");
    reply.status(pe.status).headers(pe.headers).send(pe.body);
  });
  app.setNotFoundHandler((req, reply) => {
    const pe = publicError(new BerthError("route_not_found", `no route ${req.method} ${req.url.split("?")[0]}`));
    reply.status(pe.status).send(pe.body);
  });
}
