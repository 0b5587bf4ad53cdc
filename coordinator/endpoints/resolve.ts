// Which deployment an /endpoint/... request is for, and whether the caller
// may call it (docs/deployments.md, Invocation). Shared by plain HTTP and
// websocket upgrades.

import { BerthError } from "../../shared/errors.ts";
import { baseStubType, HTTP_SERVED_TYPES } from "../../shared/tasks.ts";
import { bearerToken, mayInvoke } from "../http/index.ts";
import type { Principal, TokenRepo } from "../store/index.ts";
import type { DeploymentTargets, ResolvedDeployment } from "./types.ts";

export interface EndpointPath {
  /** By name (in the token's workspace) or by deployment id. */
  by: "name" | "id";
  key: string;
  version?: number;
  /** What follows, with a leading "/" ("/" when nothing). */
  rest: string;
  /** The query string with its "?", or "". */
  query: string;
  /** The part of the URL that names the deployment (X-Forwarded-Prefix). */
  prefix: string;
}

const VERSION = /^v(\d+)$/;

/** Parses `/endpoint/{name}[/v{N}][/rest]` and `/endpoint/id/{id}[/rest]`; undefined for other URLs. */
export function parseEndpointPath(url: string): EndpointPath | undefined {
  const q = url.indexOf("?");
  const path = q < 0 ? url : url.slice(0, q);
  const query = q < 0 ? "" : url.slice(q);
  if (!path.startsWith("/endpoint/")) return undefined;
  const segs = path.slice("/endpoint/".length).split("/");
  let i = 0;
  let by: "name" | "id" = "name";
  if (segs[0] === "id" && segs.length > 1) {
    by = "id";
    i = 1;
  }
  const key = decodeSegment(segs[i] ?? "");
  if (!key) return undefined;
  i++;
  let version: number | undefined;
  const v = by === "name" ? VERSION.exec(segs[i] ?? "") : null;
  if (v) {
    version = Number(v[1]);
    i++;
  }
  const prefix = `/endpoint/${segs.slice(0, i).join("/")}`;
  return {
    by,
    key,
    ...(version !== undefined ? { version } : {}),
    rest: `/${segs.slice(i).join("/")}`,
    query,
    prefix,
  };
}

function decodeSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

export interface Resolved extends ResolvedDeployment {
  kind: string;
  /** Whether the caller's Authorization header was berth's (then it is not passed to the app). */
  tokenUsed: boolean;
  /** The id of the token the caller used (its usage is counted to it); null for a public call. */
  tokenId: string | null;
}

const PRINCIPAL_TTL_MS = 5_000;

/**
 * Resolves tokens with a short memory: the endpoint path authenticates every
 * request, and a store round trip per request would be most of its added
 * latency. A revoked token keeps working here for up to PRINCIPAL_TTL_MS.
 */
export class EndpointAuth {
  private readonly cache = new Map<string, { p: Principal | undefined; until: number }>();

  constructor(
    private readonly tokens: TokenRepo,
    private readonly clock: () => number,
  ) {}

  async principal(authorization: string | undefined): Promise<Principal | undefined> {
    if (!authorization) return undefined;
    const secret = bearerToken(authorization);
    const now = this.clock();
    const hit = this.cache.get(secret);
    if (hit && hit.until > now) return hit.p;
    const p = await this.tokens.authenticate(secret);
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(secret, { p, until: now + PRINCIPAL_TTL_MS });
    if (p && (!hit || hit.p?.token.id !== p.token.id)) void this.tokens.touch(p.token.id).catch(() => {});
    return p;
  }
}

const unauthenticated = (why: string) => new BerthError("unauthenticated", why);

/** The deployment the request is for, checked against the caller's token. */
export async function resolveEndpoint(
  path: EndpointPath,
  authorization: string | undefined,
  auth: EndpointAuth,
  deployments: DeploymentTargets,
): Promise<Resolved> {
  let r: ResolvedDeployment;
  let tokenUsed = false;
  let tokenId: string | null = null;
  if (path.by === "name") {
    if (!authorization) {
      throw unauthenticated(
        "calling a deployment by name needs 'Authorization: Bearer <token>' of its workspace (a public deployment is also reachable without one at /endpoint/id/{deployment_id})",
      );
    }
    const p = await auth.principal(authorization);
    if (!p) throw unauthenticated("unknown or revoked token");
    mayInvoke(p, path.key);
    tokenUsed = true;
    tokenId = p.token.id;
    r = await deployments.resolveByName(p.workspace.id, path.key, path.version);
  } else {
    // Stopped ones too: whether it is stopped is told only to whom may call it (below).
    r = await deployments.resolveById(path.key, { includeStopped: true });
    if (r.stub.config.authorized !== false) {
      if (!authorization)
        throw unauthenticated("this deployment needs 'Authorization: Bearer <token>' of its workspace");
      const p = await auth.principal(authorization);
      if (!p) throw unauthenticated("unknown or revoked token");
      if (p.workspace.id !== r.deployment.workspaceId) {
        throw new BerthError("not_found", `deployment ${path.key} not found`);
      }
      mayInvoke(p, r.deployment.name);
      tokenUsed = true;
      tokenId = p.token.id;
    }
    if (!r.deployment.active) {
      throw new BerthError(
        "deployment_stopped",
        `deployment ${r.deployment.name} (${path.key}) is stopped: start it`,
        {
          deployment_id: path.key,
        },
      );
    }
  }
  const kind = baseStubType(r.deployment.kind || r.stub.type);
  const label = path.by === "name" ? `'${path.key}'` : path.key;
  // A pod deployment serves HTTP itself on its first port (coordinator/endpoints/pods.ts).
  if (!HTTP_SERVED_TYPES.has(kind) && kind !== "pod") {
    const hint =
      kind === "taskqueue"
        ? `: it is a task queue; POST to /taskqueue/${r.deployment.name} instead`
        : `: it is a ${kind} deployment, which has no HTTP endpoint`;
    throw new BerthError("not_found", `no endpoint ${label}${hint}`);
  }
  return { ...r, kind, tokenUsed, tokenId };
}
