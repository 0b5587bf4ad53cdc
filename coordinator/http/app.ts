import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from "fastify";
import type { Logger } from "pino";
import type { FleetView } from "../fleet/fleet-view.ts";
import type { JoinService } from "../fleet/join.ts";
import type { Store } from "../store/store.ts";
import { installErrorHandlers } from "./errors.ts";
import { fleetRoutes, joinRoutes } from "./routes/agents.ts";
import { healthRoutes } from "./routes/health.ts";
import { workspaceRoutes } from "./routes/workspace.ts";

export interface HttpDeps {
  store: Store;
  fleet: FleetView;
  join: JoinService;
  logger: Logger | false;
  version: string;
}

/** The coordinator's public HTTP API: one plugin per area. */
export async function buildHttpApp(deps: HttpDeps): Promise<FastifyInstance> {
  const common = {
    bodyLimit: 32 * 1024 * 1024,
    // Per-request lines would drown the log; errors are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    ajv: { customOptions: { removeAdditional: false as const, coerceTypes: "array" as const } },
  };
  const app: FastifyInstance = deps.logger
    ? Fastify({ ...common, loggerInstance: deps.logger as FastifyBaseLogger })
    : Fastify({ ...common, logger: false });
  app.decorateRequest("principal", null);
  installErrorHandlers(app);
  await app.register(healthRoutes(deps.version));
  await app.register(joinRoutes(deps.join));
  await app.register(workspaceRoutes(deps.store));
  await app.register(fleetRoutes(deps.store, deps.fleet));
  return app;
}
