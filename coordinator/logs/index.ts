export {
  DEFAULT_LOG_LIMIT,
  type LogFilters,
  type LogLine,
  type LogPage,
  LogQuery,
  type LogQueryInput,
  type LogQueryOptions,
  type LogWorkspace,
  MAX_LOG_LIMIT,
  parseLogCursor,
} from "./query.ts";
export { deploymentLogRoutes } from "./deployment-log-routes.ts";
export type { DeploymentLogDeps } from "./deployment-log-routes.ts";
export { logRoutes } from "./routes.ts";
export { createLogs, logsHttpRoutes } from "./area.ts";
export type { LogsDeps } from "./area.ts";
