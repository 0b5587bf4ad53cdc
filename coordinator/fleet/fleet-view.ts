import type { DrainedGpu, Heartbeat } from "../../shared/fleet.ts";
import type { AgentState } from "./store.ts";

export interface LiveAgent {
  agentId: string;
  heartbeat: Heartbeat;
  /** ms since epoch, by the coordinator's clock (agent clocks may be off). */
  lastSeen: number;
  state: AgentState;
}

export interface StateChange {
  agentId: string;
  from: AgentState | "unknown";
  to: AgentState;
}

/** GPUs an agent's heartbeat newly reports drained, or no longer does. */
export interface GpuHealthChange {
  agentId: string;
  hostname: string;
  drained: DrainedGpu[];
  restored: DrainedGpu[];
}

/** What changed in the drained set between two heartbeats of one agent; undefined: nothing. */
export function gpuHealthChange(prev: Heartbeat | undefined, hb: Heartbeat): GpuHealthChange | undefined {
  const before = new Map((prev?.capacity.gpus.drained ?? []).map((d) => [d.uuid, d]));
  const now = hb.capacity.gpus.drained ?? [];
  const drained = now.filter((d) => !before.has(d.uuid));
  const still = new Set(now.map((d) => d.uuid));
  const restored = [...before.values()].filter((d) => !still.has(d.uuid));
  if (drained.length === 0 && restored.length === 0) return undefined;
  return { agentId: hb.agentId, hostname: hb.hostname, drained, restored };
}

export interface FleetViewOptions {
  /** Heartbeats an agent may miss before it is lost. @default 3 */
  missedHeartbeats?: number;
  /** Floor on the lost threshold, for agents with very short intervals. @default 5000 */
  minLostAfterMs?: number;
}

/**
 * The live fleet, fed by heartbeats. Pure bookkeeping: callers pass the time,
 * so tests need no clock.
 */
export class FleetView {
  private readonly agents = new Map<string, LiveAgent>();
  private readonly missed: number;
  private readonly minLostAfterMs: number;
  /** Agent ids in the order they changed (heartbeat, leave, lost), for incremental readers (the placement index). */
  private changeLog: string[] = [];
  /** How many changes were dropped from the front of changeLog. */
  private changeBase = 0;
  private readonly gpuListeners = new Set<(c: GpuHealthChange) => void>();

  constructor(opts: FleetViewOptions = {}) {
    this.missed = opts.missedHeartbeats ?? 3;
    this.minLostAfterMs = opts.minLostAfterMs ?? 5000;
  }

  observe(hb: Heartbeat, now: number): StateChange | undefined {
    const prev = this.agents.get(hb.agentId);
    this.agents.set(hb.agentId, { agentId: hb.agentId, heartbeat: hb, lastSeen: now, state: "ready" });
    this.changed(hb.agentId);
    const gpus = gpuHealthChange(prev?.heartbeat, hb);
    if (gpus) {
      for (const fn of this.gpuListeners) {
        try {
          fn(gpus);
        } catch {
          // A listener's failure is its own; the view stays consistent.
        }
      }
    }
    if (prev?.state === "ready") return undefined;
    return { agentId: hb.agentId, from: prev?.state ?? "unknown", to: "ready" };
  }

  /** The agent said it is stopping on purpose. */
  leave(agentId: string): StateChange | undefined {
    const a = this.agents.get(agentId);
    if (!a || a.state === "left") return undefined;
    const from = a.state;
    a.state = "left";
    this.changed(agentId);
    return { agentId, from, to: "left" };
  }

  lostAfterMs(a: LiveAgent): number {
    return Math.max(this.minLostAfterMs, a.heartbeat.intervalMs * this.missed);
  }

  /** Marks agents whose heartbeats stopped as lost; returns what changed. */
  sweep(now: number): StateChange[] {
    const changes: StateChange[] = [];
    for (const a of this.agents.values()) {
      if (a.state === "ready" && now - a.lastSeen > this.lostAfterMs(a)) {
        a.state = "lost";
        this.changed(a.agentId);
        changes.push({ agentId: a.agentId, from: "ready", to: "lost" });
      }
    }
    return changes;
  }

  /** Counts every change so far; pass it to changedSince() later. */
  get version(): number {
    return this.changeBase + this.changeLog.length;
  }

  /**
   * The agents that changed since `version` (repeats possible), or undefined
   * when that is too long ago to tell (the reader then looks at list()).
   */
  changedSince(version: number): readonly string[] | undefined {
    if (version < this.changeBase) return undefined;
    return this.changeLog.slice(version - this.changeBase);
  }

  private changed(agentId: string): void {
    this.changeLog.push(agentId);
    // Bounded: a reader that lags this far rereads the whole list instead.
    if (this.changeLog.length > 100_000) {
      this.changeBase += 50_000;
      this.changeLog = this.changeLog.slice(50_000);
    }
  }

  /** Calls `fn` (synchronously, within observe) when an agent's drained GPUs change. Returns an unsubscribe. */
  onGpuHealth(fn: (c: GpuHealthChange) => void): () => void {
    this.gpuListeners.add(fn);
    return () => this.gpuListeners.delete(fn);
  }

  get(agentId: string): LiveAgent | undefined {
    return this.agents.get(agentId);
  }

  list(): LiveAgent[] {
    return [...this.agents.values()];
  }

  ready(): LiveAgent[] {
    return this.list().filter((a) => a.state === "ready");
  }
}
