// `{base_url}/v1`: OpenAI-compatible hosted inference (docs/inference.md),
// the HTTP adapter over the gateway's request path (./gateway.ts). Its own
// scope: a token of its own (the catalog listing is public), bodies read
// here rather than by Fastify (streams go out on the raw response), and
// OpenAI's error shape for everything this scope answers.

import type { IncomingMessage, ServerResponse } from "node:http";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { readBody, upstreamHeaders } from "../containers/index.ts";
import { allowDeployment, checkAccess, publicError } from "../http/index.ts";
import {
  INFERENCE_BODY_LIMIT,
  type InferenceGateway,
  type InferenceRoute,
  ROUTE_PATHS,
  SESSION_HEADER,
  sendOpenAiError,
} from "./gateway.ts";
import type { ModelEntry } from "./models.ts";

const modelJson = (m: ModelEntry) => ({
  id: m.id,
  object: "model" as const,
  created: Math.floor(Date.parse(m.deployment.startedAt) / 1000),
  owned_by: m.public ? "catalog" : "workspace",
  public: m.public,
});

const POST_ROUTES: Record<string, InferenceRoute> = Object.fromEntries(
  Object.entries(ROUTE_PATHS).map(([route, path]) => [path, route as InferenceRoute]),
);

/**
 * One POST /v1/... request, start to end: the bearer token is the caller,
 * the body is read here, the client's headers (less its token) go on to the
 * model server. Never rejects.
 */
export function serveHttp(
  gateway: InferenceGateway,
  route: InferenceRoute,
  req: IncomingMessage,
  res: ServerResponse,
  pathModel?: string,
): Promise<void> {
  return gateway.handle(
    route,
    {
      ...(pathModel !== undefined ? { pathModel } : {}),
      caller: async () => {
        const p = await gateway.principal(req.headers.authorization, true);
        checkAccess(p, { needs: "invoke", deployment: "by-handler" });
        return {
          workspaceId: p.workspace.id,
          tokenId: p.token.id,
          // A narrowed token calls its own workspace's named deployments, never the public catalog's.
          mayCall: (d) => {
            if (d.workspaceId !== p.workspace.id && p.token.deployments !== null) {
              throw new BerthError(
                "permission_denied",
                "this token is narrowed to deployments of its workspace: public catalog models are not among them",
              );
            }
            allowDeployment(p, d.name);
          },
        };
      },
      request: async () => {
        const headers = upstreamHeaders(req.headers, {
          dropAuthorization: true,
          remoteAddress: req.socket.remoteAddress,
          prefix: "",
        });
        delete headers["x-forwarded-prefix"];
        delete headers["accept-encoding"];
        const session = sessionOf(req);
        return {
          body: await readBody(req, INFERENCE_BODY_LIMIT),
          path: (req.url ?? "/").split("?")[0] ?? "/",
          headers,
          ...(session ? { session } : {}),
        };
      },
    },
    res,
  );
}

/**
 * The POST routes of /v1, taken by the coordinator's server before Fastify
 * sees them (like /endpoint/...: the added time to first token is budgeted
 * at 2 ms); false for every other request, which Fastify then routes.
 */
export function serveInferenceRequest(
  gateway: InferenceGateway,
  req: IncomingMessage,
  res: ServerResponse,
): boolean {
  if (req.method !== "POST" || !req.url?.startsWith("/v1/")) return false;
  const path = req.url.split("?")[0] ?? "";
  const route = POST_ROUTES[path];
  let model: string | undefined;
  if (!route) {
    if (!path.startsWith("/v1/models/") || !path.endsWith("/invoke")) return false;
    try {
      model = decodeURIComponent(path.slice("/v1/models/".length, -"/invoke".length));
    } catch {
      return false;
    }
    if (!model) return false;
  }
  serveHttp(gateway, route ?? "invoke", req, res, model).catch((e) => {
    gateway.d.log.error({ err: e, url: req.url }, "inference request failed");
    res.destroy();
  });
  return true;
}

export function inferenceRoutes(gateway: InferenceGateway): FastifyPluginAsync {
  return async (app) => {
    // The HTTP server has stopped taking requests: the queued usage rows go to the store before it closes.
    app.addHook("onClose", () => gateway.close());
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    app.setErrorHandler((err, req, reply) => {
      const pe = publicError(err, { shape: "openai", log: req.log, what: "inference request failed" });
      reply.code(pe.status).headers(pe.headers).send(pe.body);
    });

    app.get("/v1/models", { schema: { hide: true } }, async (req) => {
      const p = await gateway.principal(req.headers.authorization, false);
      const models = await gateway.d.models.list(p?.workspace.id);
      return { object: "list", data: models.map(modelJson) };
    });

    // Model ids may hold "/" (Org/Model): the wildcard takes them whole (Fastify has decoded it).
    app.get("/v1/models/*", { schema: { hide: true } }, async (req, reply) => {
      const model = (req.params as { "*": string })["*"];
      const p = await gateway.principal(req.headers.authorization, false);
      const found = (await gateway.d.models.list(p?.workspace.id)).find((m) => m.id === model);
      if (!found) {
        reply.hijack();
        sendOpenAiError(reply.raw, modelNotFound(model));
        return;
      }
      return modelJson(found);
    });

    const post = (path: string, route: InferenceRoute) =>
      app.post(path, { schema: { hide: true } }, async (req, reply) => {
        reply.hijack();
        await serveHttp(gateway, route, req.raw, reply.raw);
      });
    post("/v1/chat/completions", "chat.completions");
    post("/v1/completions", "completions");
    post("/v1/embeddings", "embeddings");
    // Model ids may hold "/" (Org/Model): the wildcard takes them whole.
    app.post("/v1/models/*", { schema: { hide: true } }, async (req, reply) => {
      const rest = (req.params as { "*": string })["*"];
      reply.hijack();
      if (!rest.endsWith("/invoke")) {
        sendOpenAiError(reply.raw, routeNotFound(req.url));
        return;
      }
      await serveHttp(
        gateway,
        "invoke",
        req.raw,
        reply.raw,
        decodeURIComponent(rest.slice(0, -"/invoke".length)),
      );
    });
  };
}

const modelNotFound = (model: string) =>
  new BerthError("model_not_found", `no model '${model}' in this workspace or the public catalog`);
const routeNotFound = (url: string) =>
  new BerthError(
    "route_not_found",
    `no route POST ${url.split("?")[0]}: invoke is POST /v1/models/{model}/invoke`,
  );

function sessionOf(req: IncomingMessage): string | undefined {
  const v = req.headers[SESSION_HEADER];
  const s = Array.isArray(v) ? v[0] : v;
  return s && s.length <= 256 ? s : undefined;
}
