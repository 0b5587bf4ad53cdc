// The usage area's entry point.
export { createUsage, usageHttpRoutes } from "./area.ts";
export { UsageService } from "./report.ts";
export type { UsageQuery, UsageReport } from "./report.ts";
export { UsageRepo } from "./store.ts";
export type { UsageDimension, UsageFigures, UsageRow } from "./tally.ts";
