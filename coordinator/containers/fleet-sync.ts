// The manager's view of agents: containers on agents that are gone are
// forgotten, and an agent seen anew has its managed containers adopted before
// anything is placed there (their resources count). Each ready agent's list
// is looked at again every VERIFY_EVERY_MS: a container the table holds that
// the agent no longer has, or has stopped without an exit event reaching us
// (missed while NATS was away), is handed to onGone like an exit, so it stops
// counting as capacity and its stub's tasks get a new container.

import type { Logger } from "pino";
import type { ContainerApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import type { FleetView } from "../fleet/index.ts";
import { buildClusterView } from "../scheduler/index.ts";
import type { CodePusher } from "./code-push.ts";
import { type ContainerTable, adoptedRecord } from "./container-table.ts";
import type { AgentClients } from "./types.ts";

const SYNC_RETRY_MS = 5000;
/** How often a synced agent's managed containers are listed again against the table. */
export const VERIFY_EVERY_MS = 30_000;

/** A container the table holds that its agent no longer runs: vanished, or stopped unseen. */
export interface GoneContainer {
  agentId: string;
  containerId: string;
  exitCode?: number;
  reason: string;
}

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
  /** A tracked container its agent no longer runs (handled like its exit event). */
  onGone(c: GoneContainer): void;
  /** @default VERIFY_EVERY_MS */
  verifyEveryMs?: number;
}

export class FleetSync {
  /** Agents whose existing managed containers are known (adopted at first sight). */
  private readonly synced = new Set<string>();
  private readonly syncing = new Map<string, Promise<void>>();
  private readonly retryAt = new Map<string, number>();
  private readonly verifyAt = new Map<string, number>();
  private readonly verifying = new Set<string>();

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
      } else if (
        this.synced.has(a.agentId) &&
        !this.verifying.has(a.agentId) &&
        clock() >= (this.verifyAt.get(a.agentId) ?? 0)
      ) {
        this.verifying.add(a.agentId);
        void this.d.track(this.verify(a.agentId)).finally(() => this.verifying.delete(a.agentId));
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
    this.verifyAt.delete(agentId);
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
    this.verifyAt.set(agentId, clock() + (this.d.verifyEveryMs ?? VERIFY_EVERY_MS));
    if (found.length > 0) log.info({ agentId, containers: found.length }, "adopted managed containers");
    this.d.onSynced();
  }

  /**
   * Lists the agent's managed containers again: each one the table holds as
   * running or stopping since before the list was asked for, and the agent
   * lacks or reports stopped, goes to onGone. Starting ones are the
   * starter's; a failed list is tried at the next interval.
   */
  private async verify(agentId: string): Promise<void> {
    const { containers, log, clock } = this.d;
    const listedAt = clock();
    try {
      const found = await this.api(agentId).listContainers({ labels: { [RunnerLabels.managed]: "1" } });
      if (!this.synced.has(agentId)) return;
      const byId = new Map(found.map((s) => [s.id, s]));
      for (const c of containers.all()) {
        if (c.agentId !== agentId || c.state === "starting" || c.since > listedAt) continue;
        const s = byId.get(c.id);
        if (s && s.state !== "stopped") continue;
        const reason = s ? (s.reason ?? "exited") : "vanished";
        log.warn(
          { containerId: c.id, agentId, stubId: c.stubId, reason },
          s
            ? `runner container ${c.id} stopped on agent ${agentId} with no exit event seen; handling its exit now`
            : `runner container ${c.id} vanished from agent ${agentId}; forgetting it`,
        );
        this.d.onGone({
          agentId,
          containerId: c.id,
          reason,
          ...(s?.exitCode !== undefined ? { exitCode: s.exitCode } : {}),
        });
      }
    } catch (err) {
      log.debug({ err, agentId }, "cannot list containers to verify; trying at the next interval");
    } finally {
      this.verifyAt.set(agentId, clock() + (this.d.verifyEveryMs ?? VERIFY_EVERY_MS));
    }
  }
}
