// Whether any host of the fleet could ever run a request (berth deploy's
// warning, docs/compatibility.md): placed on an empty fleet, a permanent
// refusal means no agent has what it asks for, however long it waits.

import { cpuMillicores, gpuWish, type StubSizing } from "./stub-resources.ts";
import type { LiveAgent } from "../fleet/index.ts";
import { buildClusterView } from "./cluster-view.ts";
import { type PlacementRequest, place } from "./place.ts";

/**
 * The planner's reason when no ready agent could hold `req` even with
 * nothing else running (a GPU type or count the fleet lacks, more cpu or
 * memory than the largest agent); undefined when one could, or when no agent
 * is ready (nothing is known about the fleet then).
 */
export function whyNeverPlaceable(agents: LiveAgent[], req: PlacementRequest): string | undefined {
  const view = buildClusterView(agents, []);
  if (view.agents.length === 0) return undefined;
  const p = place(view, req);
  return !p.ok && p.permanent ? p.reason : undefined;
}

/** whyNeverPlaceable for a stub's container (its cpu, memory and GPU wish). */
export function whyStubNeverPlaceable(agents: LiveAgent[], stub: StubSizing): string | undefined {
  const gpu = gpuWish(stub);
  return whyNeverPlaceable(agents, {
    cpuMillicores: cpuMillicores(stub),
    memoryBytes: stub.config.runtime.memory * 1024 * 1024,
    gpuTypes: gpu.types,
    gpuCount: gpu.count,
    ...(gpu.memoryMiB !== undefined ? { gpuMemoryMiB: gpu.memoryMiB } : {}),
    ...(stub.extra.pool ? { pool: stub.extra.pool } : {}),
  });
}
