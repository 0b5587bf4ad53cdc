import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from "fastify";
import type { Logger } from "pino";
import type { FleetView } from "../fleet/fleet-view.ts";
import type { JoinService } from "../fleet/join.ts";
import type { Objects } from "../objects/objects.ts";
import type { Secrets } from "../secrets/index.ts";
import type { Store } from "../store/store.ts";
import type { TaskService } from "../tasks/service.ts";
import { installErrorHandlers } from "./errors.ts";
import { fleetRoutes, joinRoutes } from "./routes/agents.ts";
import { gatewayObjectRoutes } from "./routes/gateway-objects.ts";
import { gatewayStubRoutes } from "./routes/gateway-stubs.ts";
import { gatewayTaskRoutes } from "./routes/gateway-tasks.ts";
import { healthRoutes } from "./routes/health.ts";
import { secretRoutes } from "./routes/secrets.ts";
import { taskStatusRoutes } from "./routes/task-status.ts";
import { workspaceRoutes } from "./routes/workspace.ts";

export interface HttpDeps {
  store: Store;
  fleet: FleetView;
  join: JoinService;
  logger: Logger | false;
  version: string;
  /** Functions and tasks: the gateway and task status routes exist when both are given. */
  tasks?: TaskService;
  objects?: Objects;
  /** Workspace secrets: the secret routes exist when given. */
  secrets?: Secrets;
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
  if (deps.secrets) await app.register(secretRoutes(deps.store.tokens, deps.secrets));
  if (deps.tasks && deps.objects) {
    await app.register(gatewayObjectRoutes(deps.store.tokens, deps.objects));
    await app.register(gatewayStubRoutes(deps.store.tokens, deps.tasks));
    await app.register(gatewayTaskRoutes(deps.store.tokens, deps.tasks));
    await app.register(taskStatusRoutes(deps.store, deps.tasks));
  }
  return app;
}
