// Where the shell route (coordinator/edge/shell.ts) looks a container
// up: the container manager's running containers here, sandboxes and pods in
// coordinator/sandboxes/targets.ts. Kept out of http/ so that the areas that
// provide targets need not import the route.

import type { ManagedContainerInfo } from "./types.ts";

/** A running container a shell may open in. */
export interface ShellTarget {
  agentId: string;
  workspaceId: string;
}

/** Where containers are looked up: the container manager's, sandboxes and pods. */
export interface ShellTargets {
  find(containerId: string): Promise<ShellTarget | undefined>;
}

/** The container manager's running containers (functions, deployments, pods). */
export function managedShellTargets(manager: { list(): ManagedContainerInfo[] }): ShellTargets {
  return {
    async find(containerId) {
      const c = manager.list().find((x) => x.id === containerId && x.state === "running");
      return c ? { agentId: c.agentId, workspaceId: c.workspaceId } : undefined;
    },
  };
}
