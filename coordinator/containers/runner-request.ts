// From a stub to what placement and the agent need: resources, GPU wishes,
// and the RunContainer request of one runner container.

import type { RunContainerRequest, RunnerConfig } from "../../agent/rpc/container-api.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import type { PlacementRequest } from "../scheduler/place.ts";
import type { StubRecord } from "./types.ts";

const MiB = 1024 * 1024;

export function gpuWish(stub: StubRecord): { types: string[]; count: number } {
  const types =
    stub.extra.gpu_types.length > 0
      ? stub.extra.gpu_types
      : stub.config.runtime.gpu
          .split(",")
          .map((s) => s.trim())
          .filter((s) => s !== "");
  // The spec: a GPU that is set with a count of 0 means one.
  const count = stub.extra.gpu_count > 0 ? stub.extra.gpu_count : types.length > 0 ? 1 : 0;
  return { types, count };
}

export function cpuMillicores(stub: StubRecord): number {
  return stub.extra.cpu_millicores > 0
    ? stub.extra.cpu_millicores
    : Math.round(stub.config.runtime.cpu * 1000);
}

/** Tasks one container of the stub takes at once. */
export function workersOf(stub: StubRecord): number {
  return Number.isInteger(stub.config.workers) && stub.config.workers > 0 ? stub.config.workers : 1;
}

export function placementRequest(stub: StubRecord, preferAgents: string[]): PlacementRequest {
  const gpu = gpuWish(stub);
  return {
    cpuMillicores: cpuMillicores(stub),
    memoryBytes: stub.config.runtime.memory * MiB,
    gpuTypes: gpu.types,
    gpuCount: gpu.count,
    preferAgents,
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
    },
    runner,
  };
  // Empty: the agent's default image.
  if (extra.image_ref) req.image = extra.image_ref;
  const gpu = gpuWish(stub);
  if (gpu.count > 0) req.gpu = { count: gpu.count, types: gpuType ? [gpuType] : gpu.types };
  if (extra.code_sha256) req.code = { sha256: extra.code_sha256 };
  // The stub's secrets (`secrets=[...]`); the agent adds BERTH_*, which no secret may be named.
  if (secretEnv && Object.keys(secretEnv).length > 0) req.env = { ...secretEnv };
  return req;
}
