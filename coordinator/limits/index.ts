// The limits area's entry point: what other areas may use of it.
export { WorkspaceLimitsCache, checkPendingTasks } from "./limits.ts";
export { limitRoutes } from "./routes.ts";
export type { LimitRouteDeps } from "./routes.ts";
export { LimitsRepo } from "./store.ts";
