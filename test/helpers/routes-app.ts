// A bare Fastify app configured as coordinator/edge/app.ts configures the
// coordinator's (body limit, validator options, principal, error mapping),
// for tests that register just the routes under test.

import Fastify, { type FastifyInstance } from "fastify";
import { installErrorHandlers } from "../../coordinator/http/errors.ts";
import { bearer } from "./auth.ts";

export function routesApp(): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: 32 * 1024 * 1024,
    ajv: { customOptions: { removeAdditional: false as const, coerceTypes: "array" as const } },
  });
  app.decorateRequest("principal", null);
  installErrorHandlers(app);
  return app;
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
