// Containers' IPv4 addresses (and exposed ports) on their agent's bridge,
// asked of the agent once per container (GetContainer) and kept until
// forget(): the same-host shortcut of ContainerTunnels dials them. Agents
// hand out addresses round robin, so a stopped container's address is not
// another's a moment later, and the coordinator forgets a container when it
// goes away.

import type { ContainerApi } from "../../api/index.ts";

export interface ContainerAddressesOptions {
  /** The agents' container APIs (AgentClientPool). */
  agents: { client(agentId: string): Pick<ContainerApi, "getContainer"> };
  /** Addresses kept; the oldest goes first past it (forget() normally keeps it small). @default 10000 */
  maxEntries?: number;
}

interface Entry {
  agentId: string;
  reach: Promise<Reach | undefined>;
}

interface Reach {
  ipv4: string;
  exposedPorts: number[];
}

export class ContainerAddresses {
  private readonly known = new Map<string, Entry>();
  private readonly maxEntries: number;

  constructor(private readonly o: ContainerAddressesOptions) {
    this.maxEntries = o.maxEntries ?? 10_000;
  }

  /**
   * The IPv4 of a running container of that agent when `port` is one of its
   * exposed ports; undefined when the agent does not know it, it is not
   * running (yet), the port is not exposed or the agent cannot be asked (the
   * caller then takes the tunnel, whose answer names the cause). Only running
   * containers are kept: one that is not running yet is asked again next time.
   */
  async lookup(agentId: string, containerId: string, port: number): Promise<string | undefined> {
    const reach = await this.reach(agentId, containerId);
    return reach?.exposedPorts.includes(port) ? reach.ipv4 : undefined;
  }

  private reach(agentId: string, containerId: string): Promise<Reach | undefined> {
    const cached = this.known.get(containerId);
    if (cached && cached.agentId === agentId) return cached.reach;
    const entry: Entry = { agentId, reach: this.ask(agentId, containerId) };
    this.known.set(containerId, entry);
    if (this.known.size > this.maxEntries) {
      const oldest = this.known.keys().next().value as string;
      this.known.delete(oldest);
    }
    void entry.reach.then((reach) => {
      if (reach === undefined && this.known.get(containerId) === entry) this.known.delete(containerId);
    });
    return entry.reach;
  }

  forget(containerId: string): void {
    this.known.delete(containerId);
  }

  private async ask(agentId: string, containerId: string): Promise<Reach | undefined> {
    try {
      const c = await this.o.agents.client(agentId).getContainer(containerId);
      return c.state === "running" && c.ipv4 ? { ipv4: c.ipv4, exposedPorts: c.exposedPorts } : undefined;
    } catch {
      return undefined;
    }
  }
}
