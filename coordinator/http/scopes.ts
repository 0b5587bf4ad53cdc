// The API's scopes (Fastify encapsulation): the token check and the error
// convention are installed once per scope, and every route plugin
// registered in a scope gets them. Public routes (health, join, OpenAPI,
// /metrics, /endpoint/..., public task queues) are registered outside any
// scope (coordinator/edge/app.ts).

import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import type { TokenRepo } from "../store/index.ts";
import { authenticator, checkRouteAccess } from "./auth.ts";
import { API_BODY_LIMIT, GATEWAY_BODY_LIMIT, scopeBodyLimit } from "./body-limits.ts";
import { type ChangeRecorder, recordChanges } from "./changes.ts";
import { installGatewayErrors } from "./gateway.ts";

/** A scope's token check: the token records, and where the changes its routes make are recorded. */
export type ScopeAuth = TokenRepo | { tokens: TokenRepo; audit?: ChangeRecorder };

function install(scope: FastifyInstance, auth: ScopeAuth): void {
  const { tokens, audit } = "tokens" in auth ? auth : { tokens: auth, audit: undefined };
  requireDeclarations(scope);
  scope.addHook("onRequest", authenticator(tokens, { checkAccess: false }));
  scope.addHook("preValidation", checkRouteAccess);
  if (audit) recordChanges(scope, audit);
}

/**
 * Every route of a token scope declares what it needs (`config.access`):
 * one without a declaration stops the app from being built, so no route
 * serves with an unstated default.
 */
export function requireDeclarations(scope: FastifyInstance): void {
  scope.addHook("onRoute", (route) => {
    if (!route.config?.access) {
      const methods = [route.method].flat().join(",");
      throw new Error(
        `route ${methods} ${route.url} declares no access: add config: { access: { needs } } (coordinator/http/access.ts)`,
      );
    }
  });
}

/** Routes that need a workspace token (`/api/v1/...`, `/v2/task`); errors are the app's `{error}` ones. */
export function tokenScope(auth: ScopeAuth, ...plugins: FastifyPluginAsync[]): FastifyPluginAsync {
  return async (scope) => {
    scopeBodyLimit(scope, API_BODY_LIMIT);
    install(scope, auth);
    for (const p of plugins) await scope.register(p);
  };
}

/**
 * The SDK's gateway routes (`/api/v1/gateway/...`): a token, and failures
 * answered 200 with `ok: false` (401 for a bad token), per the spec. A
 * plugin that streams bytes sets its own error handler (installRawErrors).
 */
export function gatewayScope(auth: ScopeAuth, ...plugins: FastifyPluginAsync[]): FastifyPluginAsync {
  return async (scope) => {
    installGatewayErrors(scope);
    scopeBodyLimit(scope, GATEWAY_BODY_LIMIT);
    install(scope, auth);
    for (const p of plugins) await scope.register(p);
  };
}
