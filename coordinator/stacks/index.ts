// The stacks area's entry point: what other areas may use of it.
export { DatabaseMembers } from "./database-member.ts";
export { DeploymentMembers } from "./deployment-member.ts";
export { healthProbe } from "./health-probe.ts";
export { stackRoutes } from "./routes.ts";
export { StackService } from "./service.ts";
export { StackRepo } from "./store.ts";
export { createStacks, stacksHttpRoutes } from "./area.ts";
export type { StacksDeps } from "./area.ts";
