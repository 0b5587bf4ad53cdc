// Entry point of deployments (docs/deployments.md).

export { checkBody, describeBodyMismatch } from "../endpoints/index.ts";
export {
  autoscalerSubject,
  KEPT_SCALING_EVENTS,
  type ScalingEvent,
  type ScalingEventJson,
} from "./scaling-events.ts";
export {
  createDeploymentTicker,
  DeploymentScheduleSource,
  type DeploymentTickerOptions,
  submitScheduleTick,
} from "./schedules.ts";
export {
  checkDeployment,
  DEPLOYMENT_KINDS,
  DEPLOYMENT_NAME,
  type DeployInput,
  type DeploymentKind,
} from "./check.ts";
export {
  DeploymentService,
  type DeploymentServiceDeps,
  type DeploymentTasks,
  type Resolved,
  SERVE_IDLE_MS,
} from "./service.ts";
export { DeploymentCache, type DeploymentStates, latestActiveVersions } from "./states.ts";
export { appRoutes } from "./app-routes.ts";
export { DeploymentBody, deploymentJson, deploymentRoutes } from "./routes.ts";
export { DeploymentRepo } from "./store.ts";
export type { DeploymentWithStub } from "./store.ts";
export { createDeployments, deploymentsHttpRoutes } from "./area.ts";
export type { DeploymentsDeps } from "./area.ts";
