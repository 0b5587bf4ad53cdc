// The fleet area's entry point: what other areas may use of it.
export { AgentNatsUsers, RevokedAgents } from "./agent-credentials.ts";
export { FleetView, gpuHealthChange } from "./fleet-view.ts";
export type { GpuHealthChange, LiveAgent } from "./fleet-view.ts";
export { FleetWatcher, validNodeAddress } from "./fleet-watcher.ts";
export { JoinService } from "./join.ts";
export { AgentRevoker } from "./revoke.ts";
export { fleetRoutes, joinRoutes } from "./routes.ts";
export { ensureStreams } from "./streams.ts";
export type { StreamRetention } from "./streams.ts";
export { AgentRepo, JoinTokenRepo } from "./store.ts";
export type { AgentState } from "./store.ts";
export { fleetHttpRoutes } from "./area.ts";
