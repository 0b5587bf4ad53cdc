import { Type } from "@sinclair/typebox";
import type { FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { Workspace } from "../store/index.ts";
import { principalOf } from "./auth.ts";
import { ErrorResponse } from "./schemas.ts";

/**
 * The caller's workspace when `{ws}` names it (its external id). Any other
 * `{ws}` reads as not found: a token never learns whether another workspace
 * or its objects exist.
 */
export function scopedWorkspace(req: FastifyRequest): Workspace {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return workspace;
}

export const WsParams = Type.Object({ ws: Type.String({ description: "workspace external_id" }) });

/** The error responses every workspace route may give. */
export const WorkspaceErrors = {
  400: ErrorResponse,
  401: ErrorResponse,
  403: ErrorResponse,
  404: ErrorResponse,
};

/** ISO 8601 time of a query parameter, normalized as created_at is stored (UTC, ms). */
export function isoQueryTime(name: string, v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  const ms = Date.parse(v);
  if (!Number.isFinite(ms)) {
    throw new BerthError("invalid_request", `${name} ${JSON.stringify(v)} is not an ISO 8601 time`);
  }
  return new Date(ms).toISOString();
}
