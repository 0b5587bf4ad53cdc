// The dashboard area's entry point: what other areas may use of it.
export { dashboardRoutes } from "./routes.ts";
export type { DashboardOptions } from "./routes.ts";
