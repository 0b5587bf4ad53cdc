// A bare Fastify app made by the coordinator's own createFastify (body limit,
// validator options, principal, error mapping), for tests that register just
// the routes under test.

import type { FastifyInstance } from "fastify";
import { createFastify } from "../../coordinator/http/fastify.ts";
import { bearer } from "./auth.ts";

export function routesApp(): FastifyInstance {
  return createFastify();
}

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

/**
 * `call(method, url, payload?, token?)`: an inject with a Bearer token,
 * `defaultToken()` unless another is given. Both are read per call: suites
 * set them up in before().
 */
export function bearerInject(app: () => FastifyInstance, defaultToken: () => string) {
  return (method: Method, url: string, payload?: unknown, token = defaultToken()) =>
    app().inject({
      method,
      url,
      headers: bearer(token),
      ...(payload !== undefined ? { payload: payload as object } : {}),
    });
}
