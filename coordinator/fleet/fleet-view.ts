import type { Heartbeat } from "../../shared/fleet.ts";
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

  constructor(opts: FleetViewOptions = {}) {
    this.missed = opts.missedHeartbeats ?? 3;
    this.minLostAfterMs = opts.minLostAfterMs ?? 5000;
  }

  observe(hb: Heartbeat, now: number): StateChange | undefined {
    const prev = this.agents.get(hb.agentId);
    this.agents.set(hb.agentId, { agentId: hb.agentId, heartbeat: hb, lastSeen: now, state: "ready" });
    this.changed(hb.agentId);
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
