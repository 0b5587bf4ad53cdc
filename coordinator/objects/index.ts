// The objects area's entry point: what other areas may use of it.
export { Objects } from "./objects.ts";
export { gatewayObjectRoutes } from "./routes.ts";
export { ObjectRepo } from "./store.ts";
export { createObjects, objectsHttpRoutes } from "./area.ts";
