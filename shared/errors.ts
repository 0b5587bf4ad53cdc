// One error type for the whole codebase. A kind decides the HTTP and gRPC status
// (mapped in coordinator/http/public-error.ts and agent/rpc/errors.ts); a code from
// CATALOG is the stable public identifier clients may match on. An entry's
// `http` overrides its kind's HTTP status where the public API has always
// answered another one (502, 504, ...); `headers` are sent with it.

export type ErrorKind =
  | "NotFound"
  | "Conflict"
  | "InvalidArgument"
  | "Unavailable"
  | "ResourceExhausted"
  | "Unauthenticated"
  | "PermissionDenied"
  | "FailedPrecondition"
  | "Unimplemented"
  | "Internal";

export const CATALOG = {
  unauthenticated: { kind: "Unauthenticated", summary: "missing, malformed or unknown token" },
  permission_denied: { kind: "PermissionDenied", summary: "the token may not do this" },
  not_found: { kind: "NotFound", summary: "no such object in this workspace" },
  model_not_found: {
    kind: "NotFound",
    summary: "no model of this name among the workspace's model deployments and the public catalog (GET /v1/models)",
  },
  route_not_found: { kind: "NotFound", summary: "no such route" },
  invalid_request: { kind: "InvalidArgument", summary: "the request is malformed" },
  invalid_json: { kind: "InvalidArgument", summary: "the body is not valid JSON" },
  conflict: { kind: "Conflict", summary: "the object already exists or changed" },
  join_token_invalid: { kind: "Unauthenticated", summary: "the join token is wrong" },
  unavailable: { kind: "Unavailable", summary: "a dependency is not reachable" },
  registry_auth_failed: { kind: "PermissionDenied", summary: "the image registry refused or needs credentials" },
  resource_exhausted: { kind: "ResourceExhausted", summary: "a limit was reached" },
  failed_precondition: { kind: "FailedPrecondition", summary: "the object is not in a state that allows this" },
  deployment_stopped: { kind: "Conflict", summary: "the deployment is stopped: start it or call another version" },
  task_args_too_large: { kind: "InvalidArgument", summary: "a task's pickled arguments exceed 4 MiB" },
  object_hash_mismatch: { kind: "InvalidArgument", summary: "the uploaded bytes do not hash to the object's name" },
  object_too_large: { kind: "ResourceExhausted", summary: "the object exceeds 256 MiB" },
  sandbox_terminated: {
    kind: "FailedPrecondition",
    summary: "the sandbox was terminated or its container ended; create or connect to another",
  },
  process_not_found: { kind: "NotFound", summary: "no process with this pid in the sandbox" },
  path_not_found: { kind: "NotFound", summary: "no file or directory at this path in the container" },
  path_invalid: { kind: "InvalidArgument", summary: "the path is not usable here (wrong type, escapes the root, ...)" },
  checkpoint_unavailable: {
    kind: "FailedPrecondition",
    summary: "memory snapshots need CRIU, and `criu check` fails on the host",
  },
  limit_exceeded: { kind: "ResourceExhausted", summary: "a workspace limit set by the operator was reached" },
  not_implemented: { kind: "Unimplemented", summary: "this route is not implemented yet" },
  bad_gateway: {
    kind: "Unavailable",
    summary: "the container (or the agent's tunnel to it) could not be reached, or failed during the request",
    http: 502,
  },
  task_timeout: {
    kind: "Unavailable",
    summary: "the request's task ran past its timeout (task_policy.timeout)",
    http: 504,
  },
  task_expired: {
    kind: "Unavailable",
    summary: "no container took the request before it expired (task_policy.expires)",
  },
  task_cancelled: { kind: "Conflict", summary: "the request's task was cancelled while it ran" },
  handler_error: {
    kind: "Unavailable",
    summary: "the deployment's handler raised (the /v1 gateway's endpoint deployments); the message is its exception",
    http: 500,
  },
  unplaceable: {
    kind: "FailedPrecondition",
    summary:
      "no host in the fleet can ever run this request (a GPU type, a GPU count or a size no agent has); the message names what the fleet has",
    http: 422,
  },
  cancelled: {
    kind: "Unavailable",
    summary: "the caller went away before its answer (the status is only logged: nobody reads it)",
    http: 499,
  },
  image_build_failed: {
    kind: "FailedPrecondition",
    summary: "a step of the image build failed; details name the step, its exit code and its last output lines",
  },
  internal: { kind: "Internal", summary: "an unexpected error; see the server log" },
} as const satisfies Record<string, CatalogEntry>;

/** One public error code: its kind, what it means, and the HTTP status and headers where they differ from the kind's. */
export interface CatalogEntry {
  kind: ErrorKind;
  summary: string;
  /** HTTP status of this code when it is not its kind's (coordinator/http/public-error.ts HTTP_STATUS). */
  http?: number;
  /** Headers every answer with this code carries. */
  headers?: Readonly<Record<string, string>>;
}

/** Whether `code` is a public error code (in CATALOG). */
export const isErrorCode = (code: string): code is ErrorCode => Object.hasOwn(CATALOG, code);

export type ErrorCode = keyof typeof CATALOG;

export class BerthError extends Error {
  readonly code: ErrorCode;
  readonly kind: ErrorKind;
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = "BerthError";
    this.code = code;
    this.kind = CATALOG[code].kind;
    if (details) this.details = details;
  }
}

export const isBerthError = (e: unknown): e is BerthError => e instanceof BerthError;

export const notFound = (what: string) => new BerthError("not_found", `${what} not found`);
export const invalid = (message: string, details?: Record<string, unknown>) =>
  new BerthError("invalid_request", message, details);

/** Short human text for any thrown value, for logs and one-line exits. */
export function describeError(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}
