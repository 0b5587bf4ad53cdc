// The ports area's entry point: what other areas may use of it.
export { PortProxy, attachPortUpgrades, exposedPortRoute, servePortRequest } from "./proxy.ts";
export type { PortTargets } from "./proxy.ts";
export { portUrl, portUrls } from "./urls.ts";
export { createPorts, portsHttpRoutes } from "./area.ts";
