// The state area's entry point: what other areas may use of it.
export { MapStore } from "./maps.ts";
export { QueueStore } from "./queues.ts";
export { serveStateOps } from "./relay-ops.ts";
export { gatewayStateRoutes, stateRoutes } from "./routes.ts";
export { SignalStore } from "./signals.ts";
export { StateObjects } from "./state.ts";
export { createState, stateHttpRoutes } from "./area.ts";
export type { StateDeps } from "./area.ts";
