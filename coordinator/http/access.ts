// What a token may do (docs/roles.md). A token has one role in its workspace
// and may be narrowed to named deployments; every route declares the one
// capability it needs in its Fastify route config (`config: { access }`),
// and the token hook (auth.ts) checks it there, before the handler runs.
// The cluster admin (fleet, agents, join tokens, creating workspaces) is a
// capability of its own: the token's `admin` flag, stronger than any role.

import type { FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { Principal, Role } from "../store/index.ts";

/** What a route needs of its caller's token. */
export type Capability =
  /** Any valid token of the workspace (who am I). */
  | "token"
  /** Read the workspace's objects. */
  | "read"
  /** Invoke deployments, run existing functions and read what they return. */
  | "invoke"
  /** Deploy, change and delete the workspace's objects. */
  | "write"
  /** The workspace's own administration: admin tokens, limits, the audit trail. */
  | "manage"
  /** The whole cluster: fleet, agents, join tokens, workspaces. */
  | "cluster";

export interface RouteAccess {
  needs: Capability;
  /**
   * A token narrowed to deployments may call this route: the path parameter
   * that names the deployment, checked here; or "by-handler" where the route
   * finds the deployment itself and calls allowDeployment.
   */
  deployment?: string;
  /** The route changes something: it is recorded in the audit trail under this action. */
  audit?: string;
  /**
   * Whether this request's `{ws}` path parameter names a workspace (then one
   * not the caller's is not found). For the one route that serves both
   * `/deployment/{ws}/{id}` and `/deployment/{id}/url`. @default always
   */
  wsIsWorkspace?: (params: Record<string, string>) => boolean;
}

declare module "fastify" {
  interface FastifyContextConfig {
    /** What the route needs of the caller's token (coordinator/http/access.ts); a route with none never serves. */
    access?: RouteAccess;
  }
}

export const ROLES = ["admin", "developer", "runner", "viewer"] as const satisfies readonly Role[];

/** The capabilities of each role. */
export const ROLE_CAPABILITIES: Record<Role, readonly Capability[]> = {
  admin: ["token", "read", "invoke", "write", "manage"],
  developer: ["token", "read", "invoke", "write"],
  runner: ["token", "invoke"],
  viewer: ["token", "read"],
};

/** The roles whose tokens have `c` (the cluster capability belongs to no role: see `admin`). */
export function rolesWith(c: Capability): Role[] {
  return ROLES.filter((r) => ROLE_CAPABILITIES[r].includes(c));
}

export function isRole(v: string): v is Role {
  return (ROLES as readonly string[]).includes(v);
}

/** Whether a token of `role` (cluster admin or not) has capability `c`. */
export function roleHas(token: { role: Role; admin: boolean }, c: Capability): boolean {
  return c === "cluster" ? token.admin : ROLE_CAPABILITIES[token.role].includes(c);
}

/** Whether every capability of role `b` is one of role `a`'s (a token may only make tokens no stronger than itself). */
export function roleCovers(a: Role, b: Role): boolean {
  return ROLE_CAPABILITIES[b].every((c) => ROLE_CAPABILITIES[a].includes(c));
}

/** Throws permission_denied unless the principal may do what `access` declares. */
export function checkAccess(p: Principal, access: RouteAccess, params: Record<string, string> = {}): void {
  const t = p.token;
  // Another workspace's routes are not found whatever the role: a refusal must not tell that they exist.
  if (
    params.ws !== undefined &&
    (access.wsIsWorkspace?.(params) ?? true) &&
    params.ws !== p.workspace.externalId &&
    !t.admin
  ) {
    throw new BerthError("not_found", `workspace ${params.ws} not found`);
  }
  if (!roleHas(t, access.needs)) {
    const who =
      access.needs === "cluster"
        ? "a cluster admin token"
        : `a token of role ${rolesWith(access.needs).join(" or ")}`;
    throw new BerthError("permission_denied", `this route needs ${who}; this token's role is ${t.role}`);
  }
  if (t.deployments === null) return;
  if (!access.deployment) {
    throw new BerthError(
      "permission_denied",
      `this token is narrowed to deployment ${t.deployments.join(", ")}: it may only invoke it`,
    );
  }
  if (access.deployment !== "by-handler") allowDeployment(p, params[access.deployment] ?? "");
}

/** Throws permission_denied when the token is narrowed to deployments other than `name`. */
export function allowDeployment(p: Principal, name: string): void {
  const narrowed = p.token.deployments;
  if (narrowed === null || narrowed.includes(name)) return;
  throw new BerthError(
    "permission_denied",
    `this token is narrowed to deployment ${narrowed.join(", ")}, not ${JSON.stringify(name)}`,
  );
}

/** The data plane's check (/endpoint/..., /v1, task queues): the token may invoke deployment `name`. */
export function mayInvoke(p: Principal, name: string): void {
  checkAccess(p, { needs: "invoke", deployment: "by-handler" });
  allowDeployment(p, name);
}

/** The declaration of the route `req` matched; a route without one is refused (and fails the route table test). */
export function accessOf(req: FastifyRequest): RouteAccess {
  const access = req.routeOptions.config.access;
  if (!access) {
    throw new Error(`route ${req.method} ${req.routeOptions.url} declares no access (config.access)`);
  }
  return access;
}
