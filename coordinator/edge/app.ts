import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { type DashboardOptions, dashboardRoutes } from "../dashboard/index.ts";
import { rewriteEndpointHost } from "../endpoints/index.ts";
import {
  type AreaRoutes,
  type ChangeRecorder,
  createFastify,
  gatewayScope,
  routesOf,
  tokenScope,
} from "../http/index.ts";
import type { TokenRepo } from "../store/index.ts";
import { dataPlaneServer } from "./data-plane.ts";
import { healthRoutes } from "./health.ts";
import { registerOpenApi } from "./openapi.ts";

/** What the coordinator's HTTP app is made of (coordinator/main.ts; tests mount a subset of areas). */
export interface HttpAppOptions {
  /**
   * The areas whose routes are served, each where its routes say; their raw
   * routes are asked in this order (main.ts puts /endpoint/..., the hot path
   * with an added-latency budget of 2 ms, first).
   */
  areas: readonly { routes: AreaRoutes }[];
  /** The token check of the API and gateway scopes. */
  tokens: TokenRepo;
  /** Where the changes their routes make are recorded (the audit trail, docs/roles.md). @default not recorded */
  audit?: ChangeRecorder;
  logger: Logger | false;
  version: string;
  /** Per-deployment host names `{deployment_id}.{endpointDomain}` (coordinator option). */
  endpointDomain?: string;
  /** PEM certificate (chain) and key: the server is HTTPS (HTTP/1.1, so upgrades work as over HTTP). @default plain HTTP */
  tls?: TlsCredentials;
  /** The web dashboard's built files, served at `/` (docs/dashboard.md). @default dist/dashboard of the package */
  dashboard?: DashboardOptions;
}

/** What an HTTPS server is made with (coordinator option `tls`, read by loadTlsCredentials). */
export interface TlsCredentials {
  cert: string | Buffer;
  key: string | Buffer;
}

type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** node:http's server, or node:https's with these credentials: the same handler either way. */
function serverConstructor(tls: TlsCredentials | undefined): (handler: RequestHandler) => Server {
  // Fastify's default keep-alive (72 s), which it sets only on servers it makes itself: node's own
  // 5 s closed idle connections that clients and load balancers (idle timeouts of 60 s) still
  // counted as open, and their next request failed ("fetch failed", other side closed).
  const keepAlive = (server: Server) => Object.assign(server, { keepAliveTimeout: KEEP_ALIVE_MS });
  if (!tls) return (handler) => keepAlive(createServer(handler));
  return (handler) => keepAlive(createHttpsServer({ cert: tls.cert, key: tls.key }, handler));
}

const KEEP_ALIVE_MS = 72_000;

/** The coordinator's public HTTP API: each area's routes where they belong, behind one data plane. */
export async function buildHttpApp(o: HttpAppOptions): Promise<FastifyInstance> {
  const routes = routesOf(o.areas);
  const app = createFastify({
    logger: o.logger,
    ...(o.endpointDomain
      ? { rewriteUrl: (req: IncomingMessage) => rewriteEndpointHost(o.endpointDomain as string, req) }
      : {}),
    // Fastify only reads it to say "https://" in its listening line; serverFactory makes the server.
    ...(o.tls ? { https: { cert: o.tls.cert, key: o.tls.key } } : {}),
    // The data plane (edge/data-plane.ts): raw routes before Fastify, and the one upgrade listener.
    serverFactory: dataPlaneServer(serverConstructor(o.tls), routes.raw, o.logger || undefined),
  });
  // First, so that their hooks (not encapsulated) cover every route registered after them.
  for (const hook of routes.hooks) await app.register(hook);
  await registerOpenApi(app, o.version);
  // Public: no token (or a check of their own).
  await app.register(healthRoutes(o.version));
  // The dashboard's page and its assets: files only; the page calls the token-scoped API below.
  await app.register(dashboardRoutes(o.dashboard));
  for (const plugin of routes.public) await app.register(plugin);
  // The token-authenticated API (/api/v1/..., /v2/task): one token hook for all of it (coordinator/http/scopes.ts).
  const auth = { tokens: o.tokens, ...(o.audit ? { audit: o.audit } : {}) };
  await app.register(tokenScope(auth, ...routes.api));
  // The SDK's gateway (/api/v1/gateway/...): a token, and failures as 200 with ok:false.
  await app.register(gatewayScope(auth, ...routes.gateway));
  return app;
}
