// The containers area: the container manager (runner containers of every
// stub: starts, scaling, health). It serves no routes of its own: the
// container list is the sandboxes area's (it lists both kinds).
import type { Area } from "../http/index.ts";
import type { Limits } from "../limits/index.ts";
import { ContainerManager } from "./manager.ts";
import type { ContainerTunnels } from "./tunnels.ts";
import { forgetTunnelsOfGoneContainers } from "./tunnel-upkeep.ts";
import type { ContainerManagerOptions } from "./types.ts";

export interface ContainersDeps extends Omit<ContainerManagerOptions, "workspaceLimits" | "workspaceLimit"> {
  /** A container that is gone takes its tunnels (keep-alive sockets) with it. */
  tunnels: Pick<ContainerTunnels, "forget">;
  /** A workspace's container limits, read again after they change. */
  limits: Pick<Limits, "get" | "onChange">;
}

export function createContainers(d: ContainersDeps): Area<ContainerManager> {
  const { tunnels, limits, ...options } = d;
  const manager = new ContainerManager({ ...options, workspaceLimits: (ws) => limits.get(ws) });
  limits.onChange((ws) => manager.invalidateLimits(ws));
  forgetTunnelsOfGoneContainers(manager, tunnels);
  return { service: manager, routes: {}, start: () => manager.start(), stop: () => manager.stop() };
}
