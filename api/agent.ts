// The agent's API as the rest of berth sees it. The gRPC client
// (AgentRpcClient) and the agent's own implementation are the same interface,
// so the coordinator and edge tools never touch protobuf types.

import type { HostCapacity } from "../shared/fleet.ts";

export type ServingStatus = "SERVING" | "NOT_SERVING";

export interface AgentHealth {
  status: ServingStatus;
  agentId: string;
  /** The berth version the agent runs. */
  version: string;
  /** Milliseconds since the agent process started. */
  uptimeMs: number;
}

export interface AgentApi {
  health(): Promise<AgentHealth>;
  capacity(): Promise<HostCapacity>;
}
