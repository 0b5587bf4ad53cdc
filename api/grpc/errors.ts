// The one place that maps berth error kinds to gRPC status codes and back.
// The server puts the catalog code in trailing metadata so the client rebuilds
// the very same BerthError; a status without it (transport failures, a
// non-berth server) is mapped from the gRPC code alone.

import * as grpc from "@grpc/grpc-js";
import { BerthError, CATALOG, type ErrorCode, type ErrorKind, describeError } from "../../shared/errors.ts";

export const ERROR_CODE_KEY = "berth-error-code";
// "-bin" keys carry bytes, so details may hold any UTF-8 JSON.
export const ERROR_DETAILS_KEY = "berth-error-details-bin";

const STATUS_OF_KIND: Record<ErrorKind, grpc.status> = {
  NotFound: grpc.status.NOT_FOUND,
  Conflict: grpc.status.ALREADY_EXISTS,
  InvalidArgument: grpc.status.INVALID_ARGUMENT,
  Unavailable: grpc.status.UNAVAILABLE,
  ResourceExhausted: grpc.status.RESOURCE_EXHAUSTED,
  Unauthenticated: grpc.status.UNAUTHENTICATED,
  PermissionDenied: grpc.status.PERMISSION_DENIED,
  FailedPrecondition: grpc.status.FAILED_PRECONDITION,
  Unimplemented: grpc.status.UNIMPLEMENTED,
  Internal: grpc.status.INTERNAL,
};

// Used only when the server did not send a catalog code.
const CODE_OF_STATUS: Partial<Record<grpc.status, ErrorCode>> = {
  [grpc.status.NOT_FOUND]: "not_found",
  [grpc.status.ALREADY_EXISTS]: "conflict",
  [grpc.status.ABORTED]: "conflict",
  [grpc.status.INVALID_ARGUMENT]: "invalid_request",
  [grpc.status.OUT_OF_RANGE]: "invalid_request",
  [grpc.status.UNAVAILABLE]: "unavailable",
  [grpc.status.RESOURCE_EXHAUSTED]: "resource_exhausted",
  [grpc.status.UNAUTHENTICATED]: "unauthenticated",
  [grpc.status.PERMISSION_DENIED]: "permission_denied",
  [grpc.status.FAILED_PRECONDITION]: "failed_precondition",
  [grpc.status.UNIMPLEMENTED]: "not_implemented",
};

export function grpcStatusOfKind(kind: ErrorKind): grpc.status {
  return STATUS_OF_KIND[kind];
}

const isCatalogCode = (s: string): s is ErrorCode => Object.hasOwn(CATALOG, s);

/** Server side: what a handler's thrown value becomes on the wire. */
export function toGrpcError(e: unknown): Partial<grpc.StatusObject> {
  const err =
    e instanceof BerthError
      ? e
      : new BerthError("internal", `internal error in the agent: ${describeError(e)}`);
  const metadata = new grpc.Metadata();
  metadata.set(ERROR_CODE_KEY, err.code);
  if (err.details) metadata.set(ERROR_DETAILS_KEY, Buffer.from(JSON.stringify(err.details)));
  return { code: STATUS_OF_KIND[err.kind], details: err.message, metadata };
}

function isServiceError(e: unknown): e is grpc.ServiceError {
  return e instanceof Error && typeof (e as Partial<grpc.ServiceError>).code === "number" && "metadata" in e;
}

function sentDetails(metadata: grpc.Metadata): Record<string, unknown> | undefined {
  const raw = metadata.get(ERROR_DETAILS_KEY)[0];
  if (raw === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(raw.toString());
    return parsed && typeof parsed === "object" ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Client side: a failed call as a BerthError. `address` names the agent in
 * messages about transport failures; `deadlineMs` explains deadline errors.
 */
export function fromGrpcError(e: unknown, ctx: { address: string; deadlineMs: number }): BerthError {
  if (e instanceof BerthError) return e;
  if (!isServiceError(e)) {
    return new BerthError("internal", `call to agent at ${ctx.address} failed: ${describeError(e)}`);
  }
  const sent = e.metadata.get(ERROR_CODE_KEY)[0];
  if (typeof sent === "string" && isCatalogCode(sent)) {
    return new BerthError(sent, e.details, sentDetails(e.metadata));
  }
  switch (e.code) {
    case grpc.status.UNAVAILABLE:
      return new BerthError("unavailable", `agent at ${ctx.address} is unreachable: ${e.details}`);
    case grpc.status.DEADLINE_EXCEEDED:
      return new BerthError(
        "unavailable",
        `agent at ${ctx.address} did not answer within ${ctx.deadlineMs} ms`,
      );
    case grpc.status.CANCELLED:
      return new BerthError("unavailable", `call to agent at ${ctx.address} was cancelled: ${e.details}`);
  }
  const code = CODE_OF_STATUS[e.code as grpc.status] ?? "internal";
  return new BerthError(code, `agent at ${ctx.address}: ${e.details}`);
}
