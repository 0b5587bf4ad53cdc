export { AgentClientPool, type AgentClientPoolOptions } from "./agent-clients.ts";
export { natsContainerEvents } from "./events.ts";
export { ContainerManager } from "./manager.ts";
export { type SnapshotImages, withSnapshotImages } from "./snapshot-images.ts";
export { desiredContainers } from "./autoscale.ts";
export { CodePusher } from "./code-push.ts";
export { ENDPOINT_PORT, applyWorkspaceRuntime, placementRequest, runnerRequest } from "./runner-request.ts";
export type {
  AgentClients,
  CodeSource,
  ContainerEventSource,
  ContainerManagerOptions,
  DeploymentStates,
  ManagedContainerInfo,
  ScaleEvent,
  StartBackoffOptions,
  StubRecord,
  StubSource,
  WorkspaceRuntime,
} from "./types.ts";
export { ContainerAddresses } from "./container-addresses.ts";
export { ContainerPythonVersions } from "./python-version.ts";
export type { ContainerExec } from "./python-version.ts";
export { managedShellTargets } from "./shell-targets.ts";
export type { ShellTarget, ShellTargets } from "./shell-targets.ts";
export { ContainerTunnels } from "./tunnels.ts";
export type { TunnelDialer } from "./tunnels.ts";
export type { SecretResolver } from "./types.ts";
export { forgetTunnelsOfGoneContainers } from "./tunnel-upkeep.ts";
export { MAX_RESULT_JSON_BYTES, forward, forwardPlain, requestFailed } from "./forward.ts";
export type {
  AnswerTap,
  ForwardRequest,
  ForwardResult,
  PlainForwardRequest,
  UpstreamTarget,
} from "./forward.ts";
export { containerError, errorOf, readBody, responseHeaders, upstreamHeaders } from "./forward-messages.ts";
export { createContainers } from "./area.ts";
export type { ContainersDeps } from "./area.ts";
export { PULL_AHEAD_HOSTS, PullAhead } from "./pull-ahead.ts";
export type { PullAheadDeps } from "./pull-ahead.ts";
