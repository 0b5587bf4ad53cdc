// Sandboxes and pods as the port proxy and the shell route look containers up
// (coordinator/ports/proxy.ts PortTargets, coordinator/containers/shell-targets.ts
// ShellTargets): only running ones, only their exposed ports.

import type { PortTargets } from "../ports/index.ts";
import type { ShellTargets } from "../containers/index.ts";
import type { StubSource } from "../containers/index.ts";
import type { SandboxRepo } from "./store.ts";

export function sandboxPortTargets(repo: Pick<SandboxRepo, "get">, stubs: StubSource): PortTargets {
  return {
    async find(containerId, port) {
      const s = await repo.get(containerId);
      if (s?.status !== "running" || !s.ports.includes(port)) return undefined;
      // Sandbox URLs carry no token (the unguessable id is the capability); pods follow `authorized`.
      const requiresAuth = s.kind === "pod" ? (await stubs.get(s.stubId))?.config.authorized === true : false;
      return { agentId: s.agentId, workspaceId: s.workspaceId, requiresAuth };
    },
  };
}

export function sandboxShellTargets(repo: Pick<SandboxRepo, "get">): ShellTargets {
  return {
    async find(containerId) {
      const s = await repo.get(containerId);
      return s?.status === "running" ? { agentId: s.agentId, workspaceId: s.workspaceId } : undefined;
    },
  };
}
