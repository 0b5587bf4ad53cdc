import type { FastifyReply, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { bearerToken } from "./bearer.ts";
import type { Principal, TokenRepo } from "../store/index.ts";

declare module "fastify" {
  interface FastifyRequest {
    principal: Principal | null;
  }
}

export { bearerToken };

const TOUCH_EVERY_MS = 60_000;

/** Builds the onRequest hook that resolves the caller's workspace from its token. */
export function authenticator(tokens: TokenRepo) {
  const lastTouched = new Map<string, number>();
  return async function authenticate(req: FastifyRequest, _reply: FastifyReply): Promise<void> {
    const secret = bearerToken(req.headers.authorization);
    const principal = await tokens.authenticate(secret);
    if (!principal) throw new BerthError("unauthenticated", "unknown or revoked token");
    req.principal = principal;
    const now = Date.now();
    if ((lastTouched.get(principal.token.id) ?? 0) + TOUCH_EVERY_MS < now) {
      lastTouched.set(principal.token.id, now);
      await tokens.touch(principal.token.id);
    }
  };
}

export function principalOf(req: FastifyRequest): Principal {
  if (!req.principal) throw new BerthError("unauthenticated", "this route needs a token");
  return req.principal;
}

/** Operator-only routes (fleet, workspaces, join tokens) need an admin token. */
export function requireAdmin(req: FastifyRequest): Principal {
  const p = principalOf(req);
  if (!p.token.admin) throw new BerthError("permission_denied", "this route needs an admin token");
  return p;
}
