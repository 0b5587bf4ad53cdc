// The logs area (docs/logs.md): container log lines queried and followed,
// and a deployment's live log stream (a token check of its own).
import type { Area, AreaRoutes } from "../http/index.ts";
import { type DeploymentLogDeps, deploymentLogRoutes } from "./deployment-log-routes.ts";
import { LogQuery, type LogQueryOptions } from "./query.ts";
import { logRoutes } from "./routes.ts";

export function logsHttpRoutes(logs: LogQuery, deploymentLogs?: DeploymentLogDeps): AreaRoutes {
  return {
    api: [logRoutes({ logs })],
    public: deploymentLogs ? [deploymentLogRoutes(deploymentLogs)] : [],
  };
}

export interface LogsDeps extends LogQueryOptions {
  /** The deployment log stream's sources: the deployment's containers and their agents. */
  deploymentLogs: DeploymentLogDeps;
}

export function createLogs(d: LogsDeps): Area<LogQuery> {
  const logs = new LogQuery({ nats: d.nats, log: d.log });
  return { service: logs, routes: logsHttpRoutes(logs, d.deploymentLogs) };
}
