// From a stub to what placement and the agent need: resources, GPU wishes,
// and the RunContainer request of one runner container.

import type { GangMember, RunContainerRequest, RunnerConfig } from "../../api/index.ts";
import { GangLabels } from "../../shared/gang.ts";
import { resolveEgressPolicy } from "../../shared/egress.ts";
import { cpuMillicores, gpuWish } from "../scheduler/index.ts";
import { stubVolumeMounts } from "../../shared/volumes.ts";
import { HTTP_SERVED_TYPES, RunnerLabels, baseStubType } from "../../shared/tasks.ts";
import type { PlacementRequest } from "../scheduler/index.ts";
import type { StubRecord, WorkspaceRuntime } from "./types.ts";

const MiB = 1024 * 1024;

/**
 * What the workspace's operator set on every container of it, over the
 * stub's own choice: gVisor when forced, and an opt-out of the user
 * namespace or of the system call allow list. A default is left out, for
 * the agent's own.
 */
export function applyWorkspaceRuntime(req: RunContainerRequest, w: WorkspaceRuntime | undefined): void {
  if (w?.isolation === "gvisor") req.isolation = "gvisor";
  if (w?.userNamespace === false) req.userNamespace = false;
  if (w?.syscallFilter === "denylist") req.syscallFilter = "denylist";
}

/** The port `berth.runtime.http_runner` listens on in a direct-served container (docs/deployments.md). */
export const ENDPOINT_PORT = 8000;

/**
 * The stub's config_version a container started with, so a coordinator that
 * adopts it after a restart can still tell it apart from a newer config.
 */
export const CONFIG_VERSION_LABEL = "berth.config_version";

/**
 * The VNI of a gang member's network: the agent needs only `gang`, but a
 * coordinator that adopts the member after a restart reads it here so that
 * no new gang takes a live one's VNI.
 */
export const GANG_VNI_LABEL = "berth.gang_vni";

/** Makes `req` the request of one gang member: the agent joins it to the gang's network and sets its environment. */
export function applyGang(req: RunContainerRequest, gang: GangMember): void {
  req.gang = { ...gang, hosts: [...gang.hosts] };
  req.labels = {
    ...req.labels,
    [GangLabels.gangId]: gang.id,
    [GangLabels.rank]: String(gang.rank),
    [GangLabels.size]: String(gang.size),
    [GANG_VNI_LABEL]: String(gang.vni),
  };
}

/** Re-exported: the helpers live in shared/ so that tasks/ and sandboxes/ need not import containers/. */
export { cpuMillicores, gpuWish };

/** Processes in one container of the stub (each takes one task at a time, or concurrent_requests requests). */
export function workersOf(stub: Pick<StubRecord, "config">): number {
  return Number.isInteger(stub.config.workers) && stub.config.workers > 0 ? stub.config.workers : 1;
}

/** Requests one worker of a direct-served container handles at once. */
export function concurrentRequestsOf(stub: Pick<StubRecord, "extra">): number {
  const n = stub.extra.concurrent_requests;
  return n !== undefined && Number.isInteger(n) && n > 0 ? n : 1;
}

export function placementRequest(stub: StubRecord, preferAgents: string[]): PlacementRequest {
  const gpu = gpuWish(stub);
  return {
    cpuMillicores: cpuMillicores(stub),
    memoryBytes: stub.config.runtime.memory * MiB,
    gpuTypes: gpu.types,
    gpuCount: gpu.count,
    ...(gpu.memoryMiB !== undefined ? { gpuMemoryMiB: gpu.memoryMiB } : {}),
    preferAgents,
    ...(stub.extra.pool ? { pool: stub.extra.pool } : {}),
  };
}

export function runnerRequest(
  stub: StubRecord,
  containerId: string,
  gpuType: string | undefined,
  secretEnv?: Record<string, string>,
): RunContainerRequest {
  const { config, extra } = stub;
  const runner: RunnerConfig = {
    stubId: stub.id,
    workspaceId: stub.workspaceId,
    stubType: stub.type,
    handler: config.handler,
    workers: workersOf(stub),
    // It takes only tasks of this config or an older one: a changed image never runs in an old container.
    configVersion: stub.configVersion,
  };
  if (config.on_start) runner.onStart = config.on_start;
  if (config.python_version) runner.pythonVersion = config.python_version;
  if (config.callback_url) runner.callbackUrl = config.callback_url;
  if (extra.retry_for.length > 0) runner.retryFor = extra.retry_for;
  const req: RunContainerRequest = {
    id: containerId,
    args: [],
    cpu: cpuMillicores(stub) / 1000,
    memoryBytes: config.runtime.memory * MiB,
    labels: {
      [RunnerLabels.stubId]: stub.id,
      [RunnerLabels.workspaceId]: stub.workspaceId,
      [RunnerLabels.managed]: "1",
      [CONFIG_VERSION_LABEL]: String(stub.configVersion),
    },
    runner,
  };
  // Direct-served types run the HTTP server instead of the task loop; the
  // runner config stays, for the code and SDK mounts and the BERTH_* settings.
  if (HTTP_SERVED_TYPES.has(baseStubType(stub.type))) {
    req.args = [
      "python3",
      "-u",
      "-m",
      "berth.runtime.http_runner",
      "--port",
      String(ENDPOINT_PORT),
      "--concurrent-requests",
      String(concurrentRequestsOf(stub)),
    ];
    req.exposedPorts = [ENDPOINT_PORT];
  }
  // A pod runs its own entrypoint with no runner (docs/sandboxes.md, Pods).
  if (baseStubType(stub.type) === "pod") {
    delete req.runner;
    // Output, Queue, Map and Signal over the agent socket, as in a function's container.
    req.bridge = { workspaceId: stub.workspaceId };
    req.args = [...(extra.entrypoint ?? [])];
    req.exposedPorts = [...(extra.ports ?? [])];
    req.egress = resolveEgressPolicy({
      block_network: extra.block_network ?? false,
      allow_list: extra.allow_list ?? [],
    });
  }
  // Empty: the agent's default image.
  if (extra.image_ref) req.image = extra.image_ref;
  if (extra.isolation === "gvisor") req.isolation = "gvisor";
  const gpu = gpuWish(stub);
  if (gpu.count > 0)
    req.gpu = {
      count: gpu.count,
      types: gpuType ? [gpuType] : gpu.types,
      ...(gpu.memoryMiB !== undefined ? { memoryMiB: gpu.memoryMiB } : {}),
    };
  if (extra.code_sha256) req.code = { sha256: extra.code_sha256 };
  const volumes = stubVolumeMounts(stub.workspaceId, config.volumes);
  if (volumes.length > 0) req.volumes = volumes;
  // The image's env_vars (extra.env, docs/images.md), then the stub's secrets
  // (`secrets=[...]`), which win on a clash; the agent adds BERTH_*, which neither may be named.
  const env = { ...(extra.env ?? {}), ...(secretEnv ?? {}) };
  if (Object.keys(env).length > 0) req.env = env;
  return req;
}
