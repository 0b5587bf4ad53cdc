// What keeps sandbox records and containers in step: activity and the TTL
// sweep, container exits (events), and a periodic look at each agent's
// sandbox containers, which also catches what happened while no coordinator
// was listening (exits, agent restarts, starts cut short) and rebuilds what
// the containers hold for placement after a coordinator restart; and the
// sandboxes of agents that are gone, which nothing else would ever end.

import type { ContainerStatus } from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { memoryKillMessage } from "../../shared/memory-kill.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { type AgentView, type Reservation, buildClusterView, gpuTypeOf } from "../scheduler/index.ts";
import type { SandboxRecord } from "./store.ts";
import { SandboxLabels } from "./request.ts";
import type { ResolvedSandboxServiceOptions } from "./types.ts";

/** In-memory activity marks older than this are dropped (the store has them). */
const ACTIVITY_MEMORY_MS = 3_600_000;

export interface SandboxUpkeepDeps {
  o: ResolvedSandboxServiceOptions;
  starting: Set<string>;
  end(s: SandboxRecord, reason: string): Promise<boolean>;
}

/** The planner's reservation kinds of this service's containers. */
export const SANDBOX_KINDS: readonly string[] = ["sandbox", "pod"];

const iso = (ms: number) => new Date(ms).toISOString();

export function exitReason(
  exitCode: number | undefined,
  reason: string | undefined,
  memoryBytes?: number,
): string {
  if (reason === "oom_killed")
    return `its container (code ${exitCode ?? "unknown"}) was ${memoryKillMessage(memoryBytes)}`;
  const why = reason && reason !== "exited" ? `, ${reason}` : "";
  return `its container exited (code ${exitCode ?? "unknown"}${why})`;
}

export class SandboxUpkeep {
  /** Last activity seen here per container id (ms). */
  private readonly active = new Map<string, number>();
  /** When last_active_at was last written per id (ms). */
  private readonly written = new Map<string, number>();
  private readonly work = new Set<Promise<unknown>>();
  private timer?: NodeJS.Timeout;
  private unsubscribe?: () => void;
  private sweeping?: Promise<void>;
  /** When this upkeep started: an agent never heard from since is judged from then. */
  private startedAt?: number;

  constructor(private readonly d: SandboxUpkeepDeps) {}

  start(): void {
    const { o } = this.d;
    this.startedAt = o.clock();
    this.unsubscribe = o.events?.subscribe((e) => this.onEvent(e));
    this.timer = setInterval(() => void this.sweep(), o.sweepIntervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    await this.sweeping;
    while (this.work.size > 0) await Promise.allSettled([...this.work]);
  }

  touch(id: string): void {
    const now = this.d.o.clock();
    this.active.set(id, now);
    if (now - (this.written.get(id) ?? 0) < this.d.o.touchEveryMs) return;
    this.written.set(id, now);
    this.track(
      this.d.o.repo
        .touch(id, iso(now))
        .catch((err) => this.d.o.log.warn({ err, sandboxId: id }, "cannot record sandbox activity")),
    );
  }

  /** Expired sandboxes end; agents' sandbox containers are reconciled. Single-flight. */
  sweep(): Promise<void> {
    this.sweeping ??= (async () => {
      try {
        await this.expire();
        await this.reconcile();
        await this.endOnGoneAgents();
      } catch (err) {
        this.d.o.log.error({ err }, `sandbox sweep failed: ${describeError(err)}`);
      }
    })().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  /** Stops and removes a container; one the agent does not have is fine, other failures are logged. */
  async removeOnAgent(agentId: string, id: string, graceMs: number): Promise<void> {
    try {
      await this.d.o.agents.client(agentId).stopContainer(id, { graceMs, remove: true });
    } catch (err) {
      if (err instanceof BerthError && err.code === "not_found") return;
      this.d.o.log.warn(
        { err, sandboxId: id, agentId },
        `cannot remove sandbox container ${id}; the next sweep tries again: ${describeError(err)}`,
      );
    }
  }

  /** Whether the agent confirms the sandbox's container is gone or ended. */
  async containerGone(s: SandboxRecord): Promise<boolean> {
    try {
      return (await this.d.o.agents.client(s.agentId).getContainer(s.id)).state === "stopped";
    } catch (err) {
      return err instanceof BerthError && err.code === "not_found";
    }
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.work.add(p);
    void p.finally(() => this.work.delete(p)).catch(() => {});
    return p;
  }

  private onEvent(e: ContainerEventMessage): void {
    if (e.type !== "exit" || e.labels?.[SandboxLabels.sandbox] !== "1") return;
    this.track(
      this.exited(e.agentId, e.containerId, exitReason(e.exitCode, e.reason, e.memoryBytes), e.exitCode),
    );
  }

  /** The container ended on its own: the sandbox is terminated (with its exit code) and the container removed. */
  private async exited(
    agentId: string,
    id: string,
    why: string,
    exitCode: number | undefined,
  ): Promise<void> {
    const { o } = this.d;
    try {
      const s = await o.repo.get(id);
      if (s && s.agentId !== agentId) return;
      o.planner.release(id);
      const ended = s ? await o.repo.markTerminated(id, iso(o.clock()), why, exitCode) : false;
      if (s && ended) o.log.info({ sandboxId: id, agentId }, `${s.kind} ${id} terminated: ${why}`);
      // A sandbox ended by terminate or the TTL is removed by that path; removing it here too would race it.
      // One whose create is still in flight (a pod's settle wait) is removed by the create, once it has
      // read the exit code and the last output for its error.
      if ((!s || ended) && !this.d.starting.has(id)) await this.removeOnAgent(agentId, id, 0);
    } catch (err) {
      o.log.warn({ err, sandboxId: id }, `cannot record the end of sandbox ${id}: ${describeError(err)}`);
    }
  }

  private async expire(): Promise<void> {
    const { o } = this.d;
    const now = o.clock();
    for (const s of await o.repo.listExpired(iso(now))) {
      const seen = this.active.get(s.id) ?? 0;
      const running = s.status === "running" ? await this.hasRunningProcess(s) : false;
      if (running === undefined) {
        // The agent did not answer: the sandbox is judged at the next sweep (a gone agent's end is endOnGoneAgents').
        continue;
      } else if (running) {
        // A running process is activity.
        await o.repo.touch(s.id, iso(now));
      } else if (seen > Date.parse(s.lastActiveAt) && seen + s.ttlSeconds * 1000 > now) {
        // Activity seen here that the throttled write has not stored yet.
        await o.repo.touch(s.id, iso(seen));
      } else if (s.status === "running" || now - Date.parse(s.createdAt) > o.orphanGraceMs) {
        await this.d.end(s, `idle for more than ${s.ttlSeconds} s (ttl_seconds)`);
      }
    }
    for (const m of [this.active, this.written])
      for (const [id, at] of m) if (now - at > ACTIVITY_MEMORY_MS) m.delete(id);
  }

  /** Whether the sandbox's agent runs a process in it; undefined when the agent cannot say now. */
  private async hasRunningProcess(s: SandboxRecord): Promise<boolean | undefined> {
    try {
      return (await this.d.o.agents.client(s.agentId).listProcesses(s.id)).some(
        (p) => p.status === "running",
      );
    } catch (err) {
      // A container the agent no longer has runs nothing (reconcile ends its sandbox); an agent from
      // before the process calls runs none of them.
      if (err instanceof BerthError && (err.code === "not_found" || err.code === "not_implemented"))
        return false;
      this.d.o.log.debug(
        { err, sandboxId: s.id },
        "cannot list the sandbox's processes; asking at the next sweep",
      );
      return undefined;
    }
  }

  private async reconcile(): Promise<void> {
    const { o } = this.d;
    for (const a of o.fleet.list()) {
      if (a.state !== "ready") continue;
      let found: ContainerStatus[];
      try {
        found = await o.agents.client(a.agentId).listContainers({ labels: { [SandboxLabels.sandbox]: "1" } });
      } catch (err) {
        o.log.debug({ err, agentId: a.agentId }, "cannot list sandbox containers; trying at the next sweep");
        continue;
      }
      const view = buildClusterView([a], []).agents[0];
      if (view) await this.reconcileAgent(a.agentId, view, found);
    }
  }

  /**
   * Sandboxes on agents lost, left or never heard from (since this start)
   * for longer than lostAgentAfterMs end, without asking the agent (it does
   * not answer): their room is released. An
   * agent that comes back later finds them terminated, and reconcileAgent
   * removes their containers there.
   */
  private async endOnGoneAgents(): Promise<void> {
    const { o, starting } = this.d;
    const now = o.clock();
    const startedAt = this.startedAt ?? now;
    for (const agentId of await o.repo.liveAgentIds()) {
      const why = goneAgentReason(agentId, o.fleet.get(agentId), {
        now,
        startedAt,
        afterMs: o.lostAgentAfterMs,
      });
      if (!why) continue;
      for (const s of await o.repo.listLive(agentId)) {
        if (starting.has(s.id)) continue;
        o.planner.release(s.id);
        if (await o.repo.markTerminated(s.id, iso(now), why))
          o.log.warn({ sandboxId: s.id, agentId }, `${s.kind} ${s.id} terminated: ${why}`);
      }
    }
  }

  private async reconcileAgent(agentId: string, view: AgentView, found: ContainerStatus[]): Promise<void> {
    const { o, starting } = this.d;
    const now = o.clock();
    const seen = new Set<string>();
    for (const c of found) {
      seen.add(c.id);
      if (starting.has(c.id)) continue;
      const s = await o.repo.get(c.id);
      if (!s) {
        if (now - c.createdAt > o.orphanGraceMs) {
          o.log.warn({ sandboxId: c.id, agentId }, "removing a sandbox container that has no record");
          await this.removeOnAgent(agentId, c.id, 0);
        }
        continue;
      }
      if (s.status === "terminated") {
        o.planner.release(c.id);
        await this.removeOnAgent(agentId, c.id, 0);
      } else if (c.state === "stopped") {
        await this.exited(agentId, c.id, exitReason(c.exitCode, c.reason, c.memoryBytes), c.exitCode);
      } else if (s.status === "starting" && now - Date.parse(s.createdAt) > o.orphanGraceMs) {
        await this.d.end(s, "its start was cut short");
      } else {
        o.planner.adopt({
          ...reservationOf(c, view),
          id: c.id,
          kind: s.kind,
          workspaceId: s.workspaceId,
          stubId: s.stubId,
        });
      }
    }
    for (const s of await o.repo.listLive(agentId)) {
      if (seen.has(s.id) || starting.has(s.id)) continue;
      if (s.status === "starting" && now - Date.parse(s.createdAt) <= o.orphanGraceMs) continue;
      await this.d.end(s, `its container is gone from agent ${agentId}`);
    }
    for (const r of o.planner.list(SANDBOX_KINDS))
      if (r.agentId === agentId && !seen.has(r.id) && !starting.has(r.id)) o.planner.release(r.id);
  }
}

/** Why a sandbox on a gone agent ends, or undefined while its agent may still come back within the bound. */
export function goneAgentReason(
  agentId: string,
  agent: { state: "ready" | "lost" | "left"; lastSeen: number } | undefined,
  o: { now: number; startedAt: number; afterMs: number },
): string | undefined {
  if (agent?.state === "ready") return undefined;
  const since = agent ? agent.lastSeen : o.startedAt;
  const silent = o.now - since;
  if (silent <= o.afterMs) return undefined;
  const s = Math.round(silent / 1000);
  if (!agent) return `its agent ${agentId} was not heard from in ${s} s`;
  return `its agent ${agentId} ${agent.state === "left" ? "left" : "is lost"} and has been silent for ${s} s`;
}

/** What a running sandbox container holds, read back from its status. */
export function reservationOf(c: ContainerStatus, view: AgentView): Reservation {
  const gpuType = c.gpus[0] ? gpuTypeOf(view, c.gpus[0]) : undefined;
  return {
    agentId: view.agentId,
    cpuMillicores: Math.round(c.cpu * 1000),
    memoryBytes: c.memoryBytes,
    gpuCount: c.gpus.length,
    gpuUuids: c.gpus,
    ...(gpuType ? { gpuType } : {}),
    ...(c.gpuMemoryMiB !== undefined ? { gpuMemoryMiB: c.gpuMemoryMiB } : {}),
  };
}
