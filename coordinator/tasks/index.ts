// The tasks area's entry point: what other areas may use of it.
export type { ContainerCounts, StubDemand, StubWait, TaskActivity } from "./activity.ts";
export { ZERO_COST_RATES, requestedResources, resolveCostRates } from "./cost.ts";
export type { CostRates, CostRatesOptions } from "./cost.ts";
export type { DirectOutcome, DirectTaskInfo, DirectTaskOptions, DirectTasks } from "./direct.ts";
export type { TaskListener, TaskStatusListener } from "./engine.ts";
export { gatewayTaskRoutes } from "./gateway-routes.ts";
export type { LiveTask } from "./live-index.ts";
export { TaskService } from "./service.ts";
export type { TaskUpdate } from "./service.ts";
export { TaskBody, TaskCostBody, taskCost, taskJson, taskStatusRoutes } from "./status-routes.ts";
export type { TaskOutputs } from "./status-routes.ts";
export { isTerminal } from "./transitions.ts";
export { TaskRepo } from "./store.ts";
export type { TaskListFilter, TaskRecord } from "./store.ts";
export { StubRepo } from "./stub-store.ts";
export type { StubInput, StubRecord } from "./stub-store.ts";
export { createTasks, tasksHttpRoutes } from "./area.ts";
