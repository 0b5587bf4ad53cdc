// What a stub asks of a host, read from its config and extra: the pure
// helpers the container starter, the sandbox service and the task cost
// estimate all use (so none of them imports another for it).

import type { StubConfig, StubExtra } from "../../shared/tasks.ts";

/** The parts of a stub the resource helpers read. */
export interface StubSizing {
  config: Pick<StubConfig, "runtime">;
  extra: Pick<StubExtra, "gpu_types" | "gpu_count" | "cpu_millicores" | "pool" | "gpu_memory_mib">;
}

/** The GPUs a stub's container asks for; `memoryMiB` when it asks for part of a shared GPU (gpu_memory=). */
export function gpuWish(stub: StubSizing): { types: string[]; count: number; memoryMiB?: number } {
  const types =
    stub.extra.gpu_types.length > 0
      ? stub.extra.gpu_types
      : stub.config.runtime.gpu
          .split(",")
          .map((s) => s.trim())
          .filter((s) => s !== "");
  // The spec: a GPU that is set with a count of 0 means one.
  const count = stub.extra.gpu_count > 0 ? stub.extra.gpu_count : types.length > 0 ? 1 : 0;
  const memoryMiB = stub.extra.gpu_memory_mib;
  // gpu_memory alone asks for a share of any shared GPU: one GPU, of whatever type.
  if (memoryMiB !== undefined && memoryMiB > 0) return { types, count: 1, memoryMiB };
  return { types, count };
}

export function cpuMillicores(stub: StubSizing): number {
  return stub.extra.cpu_millicores > 0
    ? stub.extra.cpu_millicores
    : Math.round(stub.config.runtime.cpu * 1000);
}
