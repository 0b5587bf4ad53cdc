// The deployments area (docs/deployments.md): deployments and apps, their routes.
import type { Area, AreaRoutes } from "../http/index.ts";
import { appRoutes } from "./app-routes.ts";
import { type DeploymentRouteDeps, deploymentRoutes } from "./routes.ts";
import { DeploymentService, type DeploymentServiceDeps } from "./service.ts";

export function deploymentsHttpRoutes(d: DeploymentRouteDeps): AreaRoutes {
  return { api: [deploymentRoutes(d), appRoutes({ deployments: d.deployments })] };
}

export interface DeploymentsDeps extends DeploymentServiceDeps {
  /** The routes' queue depths. */
  tasks: DeploymentServiceDeps["tasks"] & DeploymentRouteDeps["tasks"];
  /** The routes' container counts (the container manager, which is built after this area and reads its states). */
  containers: DeploymentRouteDeps["containers"];
}

export function createDeployments(d: DeploymentsDeps): Area<DeploymentService> {
  const { containers, ...deps } = d;
  const deployments = new DeploymentService(deps);
  return {
    service: deployments,
    routes: deploymentsHttpRoutes({ deployments, tasks: d.tasks, containers }),
    start: () => deployments.open(),
    stop: () => deployments.close(),
  };
}
