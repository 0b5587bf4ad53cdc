// The manager's view of agents: containers on agents that are gone are
// forgotten, and an agent seen anew has its managed containers adopted before
// anything is placed there (their resources count).

import type { Logger } from "pino";
import type { ContainerApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import type { FleetView } from "../fleet/fleet-view.ts";
import { buildClusterView } from "../scheduler/cluster-view.ts";
import type { CodePusher } from "./code-push.ts";
import { type ContainerTable, adoptedRecord } from "./container-table.ts";
import type { AgentClients } from "./types.ts";

const SYNC_RETRY_MS = 5000;

export interface FleetSyncDeps {
  fleet: FleetView;
  containers: ContainerTable;
  code: CodePusher;
  agents: AgentClients;
  log: Logger;
  clock: () => number;
  /** Keeps a background promise in the manager's settled() set. */
  track<T>(p: Promise<T>): Promise<T>;
  /** An agent's containers are known now: it takes containers from now on. */
  onSynced(): void;
}

export class FleetSync {
  /** Agents whose existing managed containers are known (adopted at first sight). */
  private readonly synced = new Set<string>();
  private readonly syncing = new Map<string, Promise<void>>();
  private readonly retryAt = new Map<string, number>();

  constructor(private readonly d: FleetSyncDeps) {}

  isSynced(agentId: string): boolean {
    return this.synced.has(agentId);
  }

  api(agentId: string): ContainerApi {
    return this.d.agents.client(agentId);
  }

  /** Forgets containers on agents that are gone and adopts the managed containers of agents seen anew. */
  sync(): void {
    const { fleet, containers, clock } = this.d;
    for (const a of fleet.list()) {
      if (a.state !== "ready") this.forgetAgent(a.agentId);
      else if (
        !this.synced.has(a.agentId) &&
        !this.syncing.has(a.agentId) &&
        clock() >= (this.retryAt.get(a.agentId) ?? 0)
      ) {
        const p = this.d.track(this.adopt(a.agentId)).finally(() => this.syncing.delete(a.agentId));
        this.syncing.set(a.agentId, p);
      }
    }
    for (const c of containers.all()) if (!fleet.get(c.agentId)) this.forgetAgent(c.agentId);
  }

  /** Stops and removes an exited container on its agent (a missing one is fine). */
  async removeOnAgent(agentId: string, containerId: string): Promise<void> {
    try {
      await this.api(agentId).stopContainer(containerId, { graceMs: 0, remove: true });
    } catch (err) {
      if (err instanceof BerthError && err.code === "not_found") return;
      this.d.log.warn({ err, containerId, agentId }, "cannot remove an exited container");
    }
  }

  private forgetAgent(agentId: string): void {
    const had = this.synced.delete(agentId);
    const forgot = this.d.containers.forgetAgent(agentId);
    this.d.code.forgetAgent(agentId);
    if (had || forgot > 0) {
      this.d.agents.release?.(agentId);
      this.d.log.info({ agentId, containers: forgot }, `agent ${agentId} is gone; forgot its containers`);
    }
  }

  /** Containers this coordinator (or a previous run of it) started there: tracked so their resources count. */
  private async adopt(agentId: string): Promise<void> {
    const { fleet, containers, log, clock } = this.d;
    let found: Awaited<ReturnType<ContainerApi["listContainers"]>>;
    try {
      found = await this.api(agentId).listContainers({ labels: { [RunnerLabels.managed]: "1" } });
    } catch (err) {
      log.warn({ err, agentId }, `cannot list containers on agent ${agentId}; not placing there yet`);
      this.retryAt.set(agentId, clock() + SYNC_RETRY_MS);
      return;
    }
    const view = buildClusterView(fleet.list(), []).agents.find((a) => a.agentId === agentId);
    if (!view || fleet.get(agentId)?.state !== "ready") return;
    for (const s of found) {
      if (containers.has(s.id)) continue;
      if (s.state === "stopped") {
        void this.d.track(this.removeOnAgent(agentId, s.id));
        continue;
      }
      const record = adoptedRecord(s, view, clock());
      if (record) containers.add(record);
    }
    this.synced.add(agentId);
    this.retryAt.delete(agentId);
    if (found.length > 0) log.info({ agentId, containers: found.length }, "adopted managed containers");
    this.d.onSynced();
  }
}
