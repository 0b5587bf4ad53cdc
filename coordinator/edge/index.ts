// The edge area's entry point: what other areas may use of it.
export { buildHttpApp } from "./app.ts";
export type { HttpAppOptions, TlsCredentials } from "./app.ts";
export { attachShellUpgrades, managedShellTargets } from "./shell.ts";
export { shellHttpRoutes, shellRoute } from "./shell.ts";
export { dataPlaneServer } from "./data-plane.ts";
export { type AlsoListening, listenAlso } from "./also-listen.ts";
