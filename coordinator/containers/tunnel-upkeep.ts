// A container that is gone takes its tunnels (keep-alive sockets to it through
// its agent) with it: the tunnels of a stub's containers are forgotten as the
// container manager drops them.

import type { ContainerManager } from "./manager.ts";
import type { ContainerTunnels } from "./tunnels.ts";

export function forgetTunnelsOfGoneContainers(
  manager: Pick<ContainerManager, "onContainersChange" | "containersOf">,
  tunnels: Pick<ContainerTunnels, "forget">,
): void {
  const tunnelled = new Map<string, Set<string>>();
  manager.onContainersChange((stubId) => {
    const live = new Set(manager.containersOf(stubId).map((c) => c.id));
    for (const id of tunnelled.get(stubId) ?? []) if (!live.has(id)) tunnels.forget(id);
    if (live.size > 0) tunnelled.set(stubId, live);
    else tunnelled.delete(stubId);
  });
}
