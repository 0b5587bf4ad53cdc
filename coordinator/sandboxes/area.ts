// The sandboxes area (docs/sandboxes.md): sandboxes and pods, their gateway
// routes, and the container list (runners and sandboxes of a workspace).
import type { Area, AreaRoutes } from "../http/index.ts";
import { type ContainerRouteDeps, containerRoutes } from "./container-routes.ts";
import { gatewayPodRoutes } from "./pod-routes.ts";
import { gatewaySandboxRoutes } from "./routes.ts";
import { SandboxService } from "./service.ts";
import type { SandboxServiceOptions } from "./types.ts";

export function sandboxesHttpRoutes(
  sandboxes: SandboxService,
  containers: ContainerRouteDeps["containers"],
): AreaRoutes {
  return {
    api: [containerRoutes({ containers, sandboxes: (ws) => sandboxes.liveContainers(ws) })],
    gateway: [gatewaySandboxRoutes(sandboxes), gatewayPodRoutes(sandboxes)],
  };
}

export interface SandboxesDeps extends SandboxServiceOptions {
  /** The container manager's runners, listed beside the sandboxes. */
  containers: ContainerRouteDeps["containers"];
}

export function createSandboxes(d: SandboxesDeps): Area<SandboxService> {
  const { containers, ...options } = d;
  const sandboxes = new SandboxService(options);
  return {
    service: sandboxes,
    routes: sandboxesHttpRoutes(sandboxes, containers),
    start: () => sandboxes.open(),
    stop: () => sandboxes.close(),
  };
}
