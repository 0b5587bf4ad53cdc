import type { FastifyReply, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { bearerToken } from "./bearer.ts";
import { requestCredential } from "./cookies.ts";
import type { Principal, TokenRepo } from "../store/index.ts";
import { accessOf, checkAccess } from "./access.ts";

declare module "fastify" {
  interface FastifyRequest {
    principal: Principal | null;
  }
}

export { bearerToken };

const TOUCH_EVERY_MS = 60_000;

/**
 * Builds the onRequest hook that resolves the caller's workspace from its
 * token and checks the token's role (and deployments) against what the
 * route declares it needs (`config.access`, coordinator/http/access.ts).
 * The token scopes check the role once the body is read
 * (`checkRouteAccess`, a preValidation hook), so a body past its limit is
 * refused as such first, as it was before roles.
 */
export function authenticator(tokens: TokenRepo, o: { checkAccess?: boolean } = {}) {
  const checks = o.checkAccess ?? true;
  const lastTouched = new Map<string, number>();
  return async function authenticate(req: FastifyRequest, _reply: FastifyReply): Promise<void> {
    // The dashboard's single sign-on session comes as a cookie when there is no Authorization header.
    const secret = requestCredential(req)?.secret ?? bearerToken(req.headers.authorization);
    const principal = await tokens.authenticate(secret);
    if (!principal) throw new BerthError("unauthenticated", "unknown or revoked token");
    req.principal = principal;
    if (checks) await checkRouteAccess(req);
    const now = Date.now();
    if ((lastTouched.get(principal.token.id) ?? 0) + TOUCH_EVERY_MS < now) {
      lastTouched.set(principal.token.id, now);
      await tokens.touch(principal.token.id);
    }
  };
}

/** The token scopes' preValidation hook: the caller's token against the route's declaration. */
export async function checkRouteAccess(req: FastifyRequest): Promise<void> {
  checkAccess(principalOf(req), accessOf(req), req.params as Record<string, string>);
}

export function principalOf(req: FastifyRequest): Principal {
  if (!req.principal) throw new BerthError("unauthenticated", "this route needs a token");
  return req.principal;
}

/**
 * A check within a route that needs the cluster admin only in some cases
 * (making a cluster admin token); routes that always need it declare
 * `access: { needs: "cluster" }` instead.
 */
export function requireAdmin(req: FastifyRequest): Principal {
  const p = principalOf(req);
  if (!p.token.admin) throw new BerthError("permission_denied", "this needs a cluster admin token");
  return p;
}
