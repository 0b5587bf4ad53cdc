// The agent tunnel's entry point: the server, and the agent's containers as
// the tunnel sees them.

import { BerthError } from "../../shared/errors.ts";
import type { ContainerApi } from "../../api/index.ts";
import type { TunnelContainers } from "./tunnel-server.ts";

export * from "../../api/index.ts";
export * from "./tunnel-server.ts";

/** The tunnel's view of a container host: a container it does not know is undefined. */
export function tunnelContainers(api: Pick<ContainerApi, "getContainer">): TunnelContainers {
  return {
    async lookup(id) {
      try {
        const s = await api.getContainer(id);
        return { state: s.state, exposedPorts: s.exposedPorts, ...(s.ipv4 ? { ipv4: s.ipv4 } : {}) };
      } catch (e) {
        if (e instanceof BerthError && e.code === "not_found") return undefined;
        throw e;
      }
    },
  };
}
