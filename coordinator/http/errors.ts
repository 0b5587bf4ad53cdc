import type { FastifyInstance } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { Socket } from "node:net";
import { HttpRefusal, publicError } from "./public-error.ts";
import { answerOnSocket } from "./raw-answer.ts";

// Fastify's side of the public error edge (coordinator/http/public-error.ts): every
// error response has the body { error: { code, message, details? } } with a
// code from CATALOG; an internal error's text stays in the log.

export { HTTP_STATUS, toBerthError } from "./public-error.ts";

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err, req, reply) => {
    const pe = publicError(err, { log: req.log });
    if (pe.status >= 500 && !pe.errorId) req.log.error({ err }, "request failed");
    reply.status(pe.status).headers(pe.headers).send(pe.body);
  });
  // Requests node's parser refuses (headers past its size limit, a malformed request line)
  // never reach Fastify: Fastify's own answer to them has its own shape, so ours replaces it.
  app.server.removeAllListeners("clientError");
  app.server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) => {
    if (err.code === "ECONNRESET" || socket.destroyed) return;
    const [status, why] =
      err.code === "HPE_HEADER_OVERFLOW"
        ? [431, "the request's headers are larger than the server accepts"]
        : err.code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? [408, "the request was not received in time"]
          : [400, "the request is not valid HTTP"];
    const pe = publicError(new HttpRefusal("invalid_request", why, { status }));
    answerOnSocket(socket, pe.status, pe.body, pe.headers);
  });
  app.setNotFoundHandler((req, reply) => {
    const pe = publicError(
      new BerthError("route_not_found", `no route ${req.method} ${req.url.split("?")[0]}`),
    );
    reply.status(pe.status).send(pe.body);
  });
}
