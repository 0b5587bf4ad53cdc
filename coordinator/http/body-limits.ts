// Request body limits (docs/api-limits.md): one per scope, a route's own where
// it takes more (object uploads, task arguments, volume files) or less. A body
// past its route's limit is refused before it is parsed, with 413 and the
// catalog's resource_exhausted (the SDK gateway's ok:false).

import type { FastifyInstance } from "fastify";

/** Routes outside any scope: health, agent join, public task queues, outputs (the app's Fastify bodyLimit). */
export const DEFAULT_BODY_LIMIT = 32 * 1024 * 1024;
/** The token-authenticated REST API (`/api/v1/...`, `/v2/task`): JSON of a few fields; a Dockerfile is the largest. */
export const API_BODY_LIMIT = 4 * 1024 * 1024;
/** The SDK gateway (`/api/v1/gateway/...`): sandbox files and stub configs; task arguments and objects set their own. */
export const GATEWAY_BODY_LIMIT = 32 * 1024 * 1024;

/** Every route registered in `scope` after this call, without a bodyLimit of its own, gets `bytes`. */
export function scopeBodyLimit(scope: FastifyInstance, bytes: number): void {
  scope.addHook("onRoute", (route) => {
    if (route.bodyLimit === undefined) route.bodyLimit = bytes;
  });
}
