// The edge area's entry point: what other areas may use of it.
export { buildHttpApp } from "./app.ts";
export type { CoordinatorHttpDeps } from "./app.ts";
export { attachShellUpgrades, managedShellTargets } from "./shell.ts";
export { shellRoute } from "./shell.ts";
export { dataPlaneServer, inferenceRoute } from "./data-plane.ts";
