// What the endpoint invocation path needs from its neighbours, as interfaces
// the real classes satisfy structurally: the deployment service (names →
// stubs), the container manager (which containers serve a stub) and the
// agent tunnel (a byte stream to a container's port).

import type { Logger } from "pino";
import type { StubRecord } from "../tasks/index.ts";
import type { TokenRepo } from "../store/index.ts";
import type { TaskListener } from "../tasks/index.ts";
import type { DirectTasks } from "../tasks/index.ts";
import type { TunnelDialer } from "../containers/index.ts";

export interface DeploymentInfo {
  id: string;
  name: string;
  version: number;
  workspaceId: string;
  kind: string;
  active: boolean;
}

export interface ResolvedDeployment {
  deployment: DeploymentInfo;
  stub: StubRecord;
}

export interface DeploymentTargets {
  /** Latest active version when `version` is undefined; throws not_found, or deployment_stopped (409) when stopped. */
  resolveByName(workspaceId: string, name: string, version?: number): Promise<ResolvedDeployment>;
  /** `includeStopped`: a stopped one is returned (its `active` false) for the caller to refuse after checking the token. */
  resolveById(id: string, o?: { includeStopped?: boolean }): Promise<ResolvedDeployment>;
  noteRequest(deploymentId: string): void;
}

export interface EndpointContainer {
  id: string;
  agentId: string;
  state: string;
}

export interface EndpointContainers {
  /** Live containers of the stub; only "running" ones take requests. */
  containersOf(stubId: string): EndpointContainer[];
  onContainersChange(listener: (stubId: string) => void): () => void;
}

/** The agent tunnel (coordinator/containers/tunnels.ts). */
export type { TunnelDialer };

/** The part of the task service the endpoints use. */
export interface EndpointTasks {
  readonly direct: DirectTasks;
  watch(taskIds: Iterable<string>, listener: TaskListener): () => void;
}

export interface EndpointDeps {
  tokens: TokenRepo;
  deployments: DeploymentTargets;
  containers: EndpointContainers;
  tunnels: TunnelDialer;
  tasks: EndpointTasks;
  log: Logger;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
  /** How long a request to a pod deployment waits for a running container. @default POD_START_WAIT_MS (60 s) */
  podStartWaitMs?: number;
}

/** The port `berth.runtime.http_runner` listens on in the container. */
export const RUNNER_HTTP_PORT = 8000;
/** Endpoint bodies (docs/deployments.md, Invocation). */
export const ENDPOINT_BODY_LIMIT = 32 * 1024 * 1024;
