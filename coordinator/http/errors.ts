import type { FastifyError, FastifyInstance } from "fastify";
import { BerthError, type ErrorCode, type ErrorKind } from "../../shared/errors.ts";

// The one place BerthError kinds become HTTP statuses. Every error response
// has the body { error: { code, message, details? } } with a code from CATALOG.

export const HTTP_STATUS: Record<ErrorKind, number> = {
  InvalidArgument: 400,
  Unauthenticated: 401,
  PermissionDenied: 403,
  NotFound: 404,
  Conflict: 409,
  FailedPrecondition: 412,
  ResourceExhausted: 429,
  Internal: 500,
  Unimplemented: 501,
  Unavailable: 503,
};

export interface ErrorBody {
  error: { code: ErrorCode; message: string; details?: Record<string, unknown> };
}

export function errorBody(e: BerthError): ErrorBody {
  return { error: { code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) } };
}

/** Turns anything thrown in a route into a BerthError a client may see. */
export function toBerthError(err: unknown): BerthError {
  if (err instanceof BerthError) return err;
  const fe = err as FastifyError;
  if (fe?.validation) {
    const where = fe.validationContext ?? "request";
    return new BerthError("invalid_request", `invalid ${where}: ${fe.message.replace(/^(body|querystring|params|headers)\/?/, "")}`);
  }
  if (fe?.code === "FST_ERR_CTP_INVALID_JSON_BODY" || (fe?.statusCode === 400 && /JSON/i.test(fe.message))) {
    return new BerthError("invalid_json", `the request body is not valid JSON: ${fe.message}`);
  }
  if (fe?.code === "FST_ERR_CTP_EMPTY_JSON_BODY") {
    return new BerthError("invalid_json", "the request body is empty but Content-Type is application/json");
  }
  if (fe?.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
    return new BerthError("invalid_request", `unsupported Content-Type: ${fe.message}`);
  }
  if (fe?.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return new BerthError("resource_exhausted", "the request body is too large");
  }
  if (typeof fe?.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new BerthError("invalid_request", fe.message);
  }
  return new BerthError("internal", "internal error");
}

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err, req, reply) => {
    const be = toBerthError(err);
    const status = HTTP_STATUS[be.kind];
    if (status >= 500) req.log.error({ err }, "request failed");
    reply.status(status).send(errorBody(be));
  });
  app.setNotFoundHandler((req, reply) => {
    const be = new BerthError("route_not_found", `no route ${req.method} ${req.url.split("?")[0]}`);
    reply.status(404).send(errorBody(be));
  });
}
