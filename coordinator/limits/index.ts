// The limits area's entry point: what other areas may use of it.
export { WorkspaceLimitsCache, checkPendingTasks } from "./limits.ts";
export { limitRoutes } from "./routes.ts";
export type { LimitRouteDeps } from "./routes.ts";
export { LimitsRepo } from "./store.ts";
export { Limits, createLimits, limitsHttpRoutes } from "./area.ts";
export type { UsageMeters } from "./area.ts";
export { BUDGET_USE_CACHE_MS, ComputeBudgets, V1TokenBudget, monthOf } from "./budgets.ts";
export type { ComputeSeconds } from "./budgets.ts";
