// The API's scopes (Fastify encapsulation): the token check and the error
// convention are installed once per scope, and every route plugin
// registered in a scope gets them. Public routes (health, join, OpenAPI,
// /metrics, /endpoint/..., public task queues) are registered outside any
// scope (coordinator/edge/app.ts).

import type { FastifyPluginAsync } from "fastify";
import type { TokenRepo } from "../store/index.ts";
import { authenticator } from "./auth.ts";
import { API_BODY_LIMIT, GATEWAY_BODY_LIMIT, scopeBodyLimit } from "./body-limits.ts";
import { installGatewayErrors } from "./gateway.ts";

/** Routes that need a workspace token (`/api/v1/...`, `/v2/task`); errors are the app's `{error}` ones. */
export function tokenScope(tokens: TokenRepo, ...plugins: FastifyPluginAsync[]): FastifyPluginAsync {
  return async (scope) => {
    scopeBodyLimit(scope, API_BODY_LIMIT);
    scope.addHook("onRequest", authenticator(tokens));
    for (const p of plugins) await scope.register(p);
  };
}

/**
 * The SDK's gateway routes (`/api/v1/gateway/...`): a token, and failures
 * answered 200 with `ok: false` (401 for a bad token), per the spec. A
 * plugin that streams bytes sets its own error handler (installRawErrors).
 */
export function gatewayScope(tokens: TokenRepo, ...plugins: FastifyPluginAsync[]): FastifyPluginAsync {
  return async (scope) => {
    installGatewayErrors(scope);
    scopeBodyLimit(scope, GATEWAY_BODY_LIMIT);
    scope.addHook("onRequest", authenticator(tokens));
    for (const p of plugins) await scope.register(p);
  };
}
