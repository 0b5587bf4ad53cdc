// Placement with room-making, still pure: from the fleet, every reservation
// the planner holds, and the containers their owners say are idle warm ones
// (no task in flight, only kept by keep_warm_seconds), to a plan: "place on
// agent X" or "place on agent X after stopping idle containers A, B", or a
// refusal with its reason. The planner (planner.ts) commits plans.

import type { LiveAgent } from "../fleet/index.ts";
import { type Reservation, buildClusterView } from "./cluster-view.ts";
import { type Placement, type PlacementRequest, place } from "./place.ts";
import type { PlacementIndex } from "./placement-index.ts";
import {
  type ContainerLimits,
  type WorkspaceUsage,
  everFitsLimits,
  fitsLimits,
  subtractUsage,
  usageOf,
} from "./quota.ts";

/**
 * Who holds a reservation: "runner", "sandbox" and "pod" today; an
 * "image-build" (or any other kind) needs no change here or in the planner,
 * which only carries the kind along for the owners' own lists.
 */
export type ReservationKind = string;

/** One reservation as the planner keeps it: the room one container holds on its agent. */
export interface Held extends Reservation {
  /** The container id (unique across kinds). */
  id: string;
  kind: ReservationKind;
  workspaceId: string;
  /** The stub whose container it is, when it has one: its own idle containers never make room for it. */
  stubId?: string;
}

/** A container its owner would stop to make room, and since when it has been idle (ms). */
export interface IdleCandidate {
  id: string;
  idleSince: number;
}

export interface PlanRequest {
  workspaceId: string;
  stubId?: string;
  placement: PlacementRequest;
  /** The workspace's limits, checked against what its reservations hold. @default none */
  limits?: ContainerLimits;
  /** Only these agents may take it (the one holding a snapshot). @default any */
  onlyAgents?: readonly string[];
  /** Agents that may take containers now (e.g. those whose existing containers are known). @default all */
  schedulable?: (agentId: string) => boolean;
}

export interface PlanInput {
  agents: LiveAgent[];
  held: readonly Held[];
  /** Idle warm containers that may be stopped, as their owners offer them. */
  idle: readonly IdleCandidate[];
  /** Containers already being stopped to make room: they still hold their room, but no longer count toward limits. */
  leaving?: { has(id: string): boolean };
  want: PlanRequest;
  /**
   * The fleet and `held` indexed (placement-index.ts, kept by the planner):
   * when set, a placement within the limits is decided by the index on the
   * few agents that can win instead of by place() over the whole fleet; the
   * decision is the same. @default none
   */
  index?: PlacementIndex;
  /** What the workspace's entries of `held` hold, those `leaving` left out, when the caller keeps count (limits check it). @default summed from held */
  usageOf?: (workspaceId: string) => WorkspaceUsage;
}

export type Plan =
  | { ok: true; agentId: string; gpuType?: string; stop: string[] }
  | {
      ok: false;
      reason: string;
      /** Waiting cannot help (too big for every agent, or for the workspace's limit itself). */
      permanent: boolean;
      /** Set when a workspace limit refused it (not the fleet's room). */
      limit?: keyof ContainerLimits;
      /** No agent at all is ready. */
      noAgents?: boolean;
    };

/**
 * The plan for one container. Limits first: when the workspace is at one,
 * its own idle containers (longest idle first) are stopped until it fits.
 * Then room: place() on what the reservations leave; when nothing fits, the
 * agent that needs the fewest idle containers stopped (longest idle first
 * on each agent) takes it.
 */
export function planPlacement(input: PlanInput): Plan {
  // The common case first, without a closure or a copy: within the limits, and the index finds room.
  const { want, index } = input;
  if (index && !want.onlyAgents && (!want.limits || withinLimits(input, want.limits))) {
    const placed = index.place(want.placement, want.schedulable ?? anyAgent);
    if (placed)
      return placed.gpuType
        ? { ok: true, agentId: placed.agentId, gpuType: placed.gpuType, stop: [] }
        : { ok: true, agentId: placed.agentId, stop: [] };
  }
  return planWithRoomMaking(input);
}

const anyAgent = () => true;

/** Whether one more container fits the workspace's limits as they stand (nothing stopped). */
function withinLimits(input: PlanInput, limits: ContainerLimits): boolean {
  const ws = input.want.workspaceId;
  const usage =
    input.usageOf?.(ws) ??
    usageOf(input.held.filter((h) => h.workspaceId === ws && !input.leaving?.has(h.id)));
  return fitsLimits(limits, usage, input.want.placement).ok;
}

/** planPlacement() past the fast path: limits that stop idle containers, no room found by the index, or no index. */
function planWithRoomMaking(input: PlanInput): Plan {
  const { want } = input;
  const req = want.placement;
  // Built only when needed: with no idle container and no limit, nothing here walks every reservation.
  let byIdMap: Map<string, Held> | undefined;
  const byId = () => {
    byIdMap ??= new Map(input.held.map((h) => [h.id, h]));
    return byIdMap;
  };
  let idleCandidates: IdleCandidate[] | undefined;
  const candidates = () => {
    idleCandidates ??= input.idle
      .filter((c) => {
        const h = byId().get(c.id);
        return h !== undefined && (want.stubId === undefined || h.stubId !== want.stubId);
      })
      .sort((a, b) => a.idleSince - b.idleSince || a.id.localeCompare(b.id));
    return idleCandidates;
  };
  const stop = new Set<string>();

  if (want.limits) {
    const limits = want.limits;
    const ws = want.workspaceId;
    const base =
      input.usageOf?.(ws) ??
      usageOf(input.held.filter((h) => h.workspaceId === ws && !input.leaving?.has(h.id)));
    // Less what the idle containers chosen so far hold (only the workspace's own are ever chosen here).
    const usage = () => {
      if (stop.size === 0) return base;
      const gone = [...stop].flatMap((id) => {
        const h = byId().get(id);
        return h && h.workspaceId === ws && !input.leaving?.has(id) ? [h] : [];
      });
      return subtractUsage(base, usageOf(gone));
    };
    let check = fitsLimits(limits, usage(), req);
    if (!check.ok) {
      if (!everFitsLimits(limits, req))
        return { ok: false, reason: check.reason, permanent: true, limit: check.limit };
      for (const c of candidates()) {
        if (byId().get(c.id)?.workspaceId !== want.workspaceId) continue;
        stop.add(c.id);
        check = fitsLimits(limits, usage(), req);
        if (check.ok) break;
      }
      if (!check.ok) return { ok: false, reason: check.reason, permanent: false, limit: check.limit };
    }
  }

  const agents = want.onlyAgents
    ? input.agents.filter((a) => want.onlyAgents?.includes(a.agentId))
    : input.agents;
  const viewWithout = (gone: Set<string>) =>
    buildClusterView(
      agents,
      input.held.filter((h) => !gone.has(h.id)),
      want.schedulable,
    );
  const view = viewWithout(stop);
  const first = place(view, req);
  if (first.ok) return planned(first, stop);
  const refusal = { ...first, ...(view.agents.length === 0 ? { noAgents: true } : {}) };
  if (first.permanent) return refusal;

  let best: { placed: Placement & { ok: true }; stop: Set<string> } | undefined;
  for (const agent of view.agents) {
    if (!agent.ready) continue;
    const mine = candidates().filter((c) => !stop.has(c.id) && byId().get(c.id)?.agentId === agent.agentId);
    const more = new Set(stop);
    for (const c of mine) {
      if (best && more.size >= best.stop.size) break;
      more.add(c.id);
      const one = viewWithout(more).agents.filter((a) => a.agentId === agent.agentId);
      const placed = place({ agents: one }, req);
      if (placed.ok) {
        best = { placed, stop: more };
        break;
      }
    }
  }
  if (best) return planned(best.placed, best.stop);
  return {
    ...refusal,
    reason: `${first.reason}; ${candidates().length === 0 ? "no idle warm container can be stopped to make room" : "stopping every idle warm container would not make enough room on any one agent"}`,
  };
}

function planned(p: Placement & { ok: true }, stop: Set<string>): Plan {
  return {
    ok: true,
    agentId: p.agentId,
    ...(p.gpuType ? { gpuType: p.gpuType } : {}),
    stop: [...stop],
  };
}
