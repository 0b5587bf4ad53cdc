export { AgentClientPool, type AgentClientPoolOptions } from "./agent-clients.ts";
export { natsContainerEvents } from "./events.ts";
export { ContainerManager } from "./manager.ts";
export { placementRequest, runnerRequest } from "./runner-request.ts";
export type {
  AgentClients,
  CodeSource,
  ContainerEventSource,
  ContainerManagerOptions,
  ManagedContainerInfo,
  StartBackoffOptions,
  StubRecord,
  StubSource,
} from "./types.ts";
