// The one public error edge (docs/design-notes.md, "One public error edge"):
// every path that answers a client — Fastify routes, the gateway routes, the
// raw /endpoint/... and exposed-port paths, websocket upgrade refusals — turns
// whatever it caught into { status, body, headers } here. Codes come from
// CATALOG (shared/errors.ts); statuses from the code's entry or its kind (or
// an HttpRefusal's own, for the few paths that always answered another). An
// internal error's text, and a MaskedError's (a transport's words, an agent's
// address), never leaves the server: the client gets an id, and the log line
// with the real error carries the same id.
//
// This file imports nothing from the coordinator's areas, so every area that
// answers clients can use it without a cycle.

import { randomBytes } from "node:crypto";
import {
  BerthError,
  CATALOG,
  type CatalogEntry,
  type ErrorCode,
  type ErrorKind,
} from "../../shared/errors.ts";

/** The HTTP status of each kind; a catalog entry's `http` overrides it for its code. */
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

/**
 * A BerthError answered with a status (and headers) of its own, where one
 * path has always answered differently from the code's catalog status
 * (405 with Allow, 413, 426 with Upgrade).
 */
export class HttpRefusal extends BerthError {
  readonly status: number | undefined;
  readonly headers: Readonly<Record<string, string>> | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    o: { status?: number; headers?: Record<string, string>; details?: Record<string, unknown> } = {},
  ) {
    super(code, message, o.details);
    this.status = o.status;
    this.headers = o.headers;
  }
}

/**
 * An error whose words are for the operator alone: a socket's or a driver's
 * text, an agent's address. The message (the detail) and `cause` go to the
 * log under a new error id; the client gets what the failure was about (what
 * it named itself: a container's port, a pod), the code's catalog summary and
 * that id.
 */
export class MaskedError extends BerthError {
  /** The start of the client's message, in its own terms ("port 8080 of container c-1"). */
  readonly about: string | undefined;

  constructor(code: ErrorCode, detail: string, o: { about?: string; cause?: unknown } = {}) {
    super(code, detail);
    this.about = o.about;
    if (o.cause !== undefined) (this as { cause?: unknown }).cause = o.cause;
  }
}

/** The message a MaskedError is answered with: what it was about, its code's summary, the id of its log line. */
export const maskedDetailMessage = (code: ErrorCode, id: string, about?: string): string =>
  `${about ? `${about}: ` : ""}${CATALOG[code].summary}; the server log has the details under id ${id}`;

/** The API's error body: `{ error: { code, message, details? } }`. */
export interface ErrorBody {
  error: { code: ErrorCode; message: string; details?: Record<string, unknown> };
}

/** The OpenAI-style body of the `/v1` gateway: `{ error: { message, type, code } }`. */
export interface OpenAiErrorBody {
  error: { message: string; type: string; code: ErrorCode };
}

/**
 * The body shapes of the public API:
 * - `api`: `{error}` with the code's status (REST routes, raw paths, websockets);
 * - `gateway`: `{ok: false, error}` with 200, 401 for a bad token (the spec's SDK gateway);
 * - `gateway-raw`: `{ok: false, error}` with the code's status (gateway routes that stream bytes);
 * - `openai`: `{error: {message, type, code}}` with the code's status (the `/v1` gateway).
 */
export type ErrorShape = "api" | "gateway" | "gateway-raw" | "openai";

/** pino's logger, a Fastify request's, or anything with the same error method. */
export interface EdgeLog {
  error(obj: object, msg: string): void;
}

export interface PublicErrorOptions {
  /** @default "api" */
  shape?: ErrorShape;
  /** Where an internal error is logged, with its id. Without one the error is still masked. */
  log?: EdgeLog;
  /** The log line's message. @default "request failed" */
  what?: string;
  /** More fields for the log line (url, task id, ...). */
  context?: Record<string, unknown>;
  /** Fields beside `error` in the body (the endpoint path's `task_id`). */
  extra?: Record<string, unknown>;
}

export interface PublicError {
  status: number;
  body: Record<string, unknown>;
  headers: Record<string, string>;
  /** The error as the client sees it (masked when internal). */
  error: BerthError;
  /** The id in the body and in the log line, for an internal error or a MaskedError. */
  errorId?: string;
}

type FastifyLikeError = {
  validation?: unknown;
  validationContext?: string;
  code?: string;
  statusCode?: number;
  message: string;
};

/**
 * Anything thrown, as a BerthError: BerthErrors as they are, Fastify's
 * request errors (validation, bad JSON, body too large) as the client's
 * mistakes, everything else (TypeError, a driver's error, ...) as internal.
 * An internal result keeps the original as its `cause`.
 */
export function toBerthError(err: unknown): BerthError {
  if (err instanceof BerthError) return err;
  const fe = err as FastifyLikeError | undefined;
  if (fe?.validation) {
    const where = fe.validationContext ?? "request";
    return new BerthError(
      "invalid_request",
      `invalid ${where}: ${fe.message.replace(/^(body|querystring|params|headers)\/?/, "")}`,
    );
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
    // 413 (not the code's 429): retrying the same body cannot succeed.
    return new HttpRefusal(
      "resource_exhausted",
      "the request body is larger than this route's limit (docs/api-limits.md)",
      {
        status: 413,
      },
    );
  }
  if (fe && typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new BerthError("invalid_request", fe.message);
  }
  const away = dependencyAway(err);
  if (away) {
    const unavailable = new BerthError("unavailable", away);
    (unavailable as { cause?: unknown }).cause = err;
    return unavailable;
  }
  const internal = new BerthError("internal", "internal error");
  (internal as { cause?: unknown }).cause = err;
  return internal;
}

/** NATS client errors of a server or cluster that is away or electing a leader (nats.js NatsError codes). */
const NATS_AWAY = new Set([
  "TIMEOUT",
  "503",
  "CONNECTION_CLOSED",
  "CONNECTION_DRAINING",
  "CONNECTION_REFUSED",
  "CONNECTION_TIMEOUT",
  "DISCONNECT",
]);
/** PostgreSQL's "connection exception" (08...) and "operator intervention" shutdowns (57P01-57P03). */
const PG_AWAY = /^(08\d{3}|57P0[123])$/;
const SOCKET_AWAY = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH"]);

/**
 * What the client is told when a dependency the coordinator needs (NATS,
 * PostgreSQL) is away for a moment: a NATS node stopping or a stream
 * electing a new leader, a database restarting. These are not berth's bugs
 * and a retry can succeed, so they are `unavailable` (503), not internal;
 * the text names the dependency, never its address or the driver's words.
 */
function dependencyAway(err: unknown): string | undefined {
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | undefined;
  if (!e || typeof e !== "object") return undefined;
  const code = typeof e.code === "string" ? e.code : "";
  const message = typeof e.message === "string" ? e.message : "";
  if (e.name === "NatsError" && NATS_AWAY.has(code))
    return "the cluster's message bus (NATS) did not answer in time; try again";
  if (PG_AWAY.test(code) || /^Connection terminated|timeout exceeded when trying to connect/.test(message))
    return "the cluster's store (the database) is not reachable; try again";
  if (SOCKET_AWAY.has(code)) return "a service the coordinator needs is not reachable; try again";
  return undefined;
}

/** The HTTP status a client gets for `e` (before the gateway's 200 convention). */
export function statusOf(e: BerthError): number {
  if (e instanceof HttpRefusal && e.status !== undefined) return e.status;
  const entry: CatalogEntry = CATALOG[e.code];
  return entry.http ?? HTTP_STATUS[e.kind];
}

/** A fresh id for one internal error: in the client's message and the log line. */
export const newErrorId = (): string => `err-${randomBytes(6).toString("hex")}`;

/** The message an internal error is answered with. */
export const maskedMessage = (id: string): string => `internal error; the server log has it under id ${id}`;

const OPENAI_TYPES: Record<ErrorKind, string> = {
  InvalidArgument: "invalid_request_error",
  FailedPrecondition: "invalid_request_error",
  Conflict: "invalid_request_error",
  Unauthenticated: "authentication_error",
  PermissionDenied: "permission_error",
  NotFound: "not_found_error",
  ResourceExhausted: "rate_limit_error",
  Unavailable: "service_unavailable_error",
  Unimplemented: "invalid_request_error",
  Internal: "server_error",
};

/** The OpenAI error `type` of a kind. */
export const openAiType = (kind: ErrorKind): string => OPENAI_TYPES[kind];

/**
 * Any error as the public API answers it: status, body and headers, in the
 * given shape. An internal error is logged (with `log`) under a new id and
 * answered with that id only.
 */
export function publicError(err: unknown, o: PublicErrorOptions = {}): PublicError {
  let e = toBerthError(err);
  let errorId: string | undefined;
  if (e instanceof MaskedError) {
    errorId = newErrorId();
    o.log?.error({ err: e.cause ?? e, detail: e.message, errorId, ...o.context }, o.what ?? "request failed");
    e = new BerthError(e.code, maskedDetailMessage(e.code, errorId, e.about));
  } else if (e.code === "unavailable" && e.cause !== undefined) {
    // A dependency away (dependencyAway): the operator needs the driver's own words.
    o.log?.error({ err: e.cause, ...o.context }, `${o.what ?? "request failed"}: ${e.message}`);
  }
  if (e.kind === "Internal") {
    errorId = newErrorId();
    const original = e.cause !== undefined ? e.cause : err;
    o.log?.error({ err: original, errorId, ...o.context }, o.what ?? "request failed");
    e = new BerthError("internal", maskedMessage(errorId));
  }
  const entry: CatalogEntry = CATALOG[e.code];
  const headers: Record<string, string> = {
    ...(entry.headers ?? {}),
    ...(err instanceof HttpRefusal ? (err.headers ?? {}) : {}),
  };
  const status = statusOf(err instanceof HttpRefusal ? err : e);
  const error = { code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) };
  const shape = o.shape ?? "api";
  let out: PublicError;
  if (shape === "gateway" || shape === "gateway-raw") {
    const gatewayStatus = shape === "gateway-raw" ? status : e.kind === "Unauthenticated" ? 401 : 200;
    out = { status: gatewayStatus, body: { ok: false, error, ...o.extra }, headers, error: e };
  } else if (shape === "openai") {
    const body: OpenAiErrorBody = { error: { message: e.message, type: openAiType(e.kind), code: e.code } };
    out = { status, body: { ...body, ...o.extra }, headers, error: e };
  } else {
    out = { status, body: { error, ...o.extra }, headers, error: e };
  }
  if (errorId) out.errorId = errorId;
  return out;
}
