// Placement with room-making, still pure: from the fleet, every reservation
// the planner holds, and the containers their owners say are idle warm ones
// (no task in flight, only kept by keep_warm_seconds), to a plan: "place on
// agent X" or "place on agent X after stopping idle containers A, B", or a
// refusal with its reason. The planner (planner.ts) commits plans.

import type { LiveAgent } from "../fleet/index.ts";
import { type Reservation, buildClusterView, gangAddressOf } from "./cluster-view.ts";
import { type Placement, type PlacementRequest, gangShortReason, place } from "./place.ts";
import type { PlacementIndex } from "./placement-index.ts";
import {
  type ContainerLimits,
  type WorkspaceUsage,
  everFitsLimits,
  fitsLimits,
  withinTypeLimits,
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

/**
 * A running container whose workload may be preempted (its stub says
 * `preemptible`), at its stub's priority. Only a request of a higher
 * priority may preempt it.
 */
export interface PreemptCandidate {
  id: string;
  priority: number;
  /** ms since epoch; of equal priorities the newest goes first (the least work lost). */
  startedAt: number;
}

export interface PlanRequest {
  workspaceId: string;
  stubId?: string;
  /** Higher first; a request may preempt preemptible work of a lower priority only. @default 0 */
  priority?: number;
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
  /** Running preemptible containers, as their owners offer them. @default none */
  preemptible?: readonly PreemptCandidate[];
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
  | {
      ok: true;
      agentId: string;
      gpuType?: string;
      /** The shared GPU chosen for a gpu_memory request. */
      gpuUuid?: string;
      stop: string[];
      /** Running containers to preempt for it (SIGTERM, grace, their tasks requeued); absent when none. */
      preempt?: string[];
    }
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
  // The index knows no pools: a request for one is placed by place(), which filters the fleet by it.
  if (
    index &&
    !want.onlyAgents &&
    want.placement.pool === undefined &&
    !(want.limits?.maxGpusByType && want.placement.gpuCount > 0) &&
    (!want.limits || withinLimits(input, want.limits))
  ) {
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
  let req = want.placement;
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
    // GPUs by type: only the types still under their limits may take it.
    const typed = withinTypeLimits(limits, usage(), req, () => fleetGpuTypes(input.agents));
    if (!typed.ok) return { ok: false, reason: typed.reason, permanent: false, limit: typed.limit };
    req = typed.placement;
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
  const preempting = planPreemption(input, req, viewWithout, candidates(), stop);
  if (preempting) return preempting;
  return {
    ...refusal,
    reason: `${first.reason}; ${candidates().length === 0 ? "no idle warm container can be stopped to make room" : "stopping every idle warm container would not make enough room on any one agent"}`,
  };
}

/** Where each rank of a gang goes (index = rank) and what its plan stops, or why not. */
export type GangPlan =
  | { ok: true; members: (Extract<Plan, { ok: true }> & { gangAddress: string })[] }
  | Extract<Plan, { ok: false }>;

/**
 * A gang's plan: `size` members of
 * input.want on distinct agents that have a gang address, each planned by
 * planPlacement() on the agents the earlier members left. Pure: nothing is
 * committed, so a gang that does not fit whole leaves no trace. Each member
 * is planned as if it were the only new container (the limits count one
 * more each time); the planner commits them one by one, where a limit
 * reached by the gang as a whole still refuses it.
 */
export function planGang(input: PlanInput, size: number): GangPlan {
  const address = new Map<string, string>();
  let noAddress = 0;
  for (const a of input.agents) {
    const at = a.state === "ready" ? gangAddressOf(a.heartbeat) : undefined;
    if (at) address.set(a.agentId, at);
    else if (a.state === "ready") noAddress++;
  }
  const taken = new Set<string>();
  const members: Extract<GangPlan, { ok: true }>["members"] = [];
  const base = input.want.schedulable;
  while (members.length < size) {
    const want: PlanRequest = {
      ...input.want,
      schedulable: (id) => address.has(id) && !taken.has(id) && (base?.(id) ?? true),
    };
    const plan = planPlacement(withWant(input, want));
    if (!plan.ok) {
      // A limit, a request no agent could ever hold, no agent at all: the member's own reason says it.
      if (plan.limit || (plan.permanent && members.length === 0) || plan.noAgents) return plan;
      const last = address.size > taken.size ? plan.reason : undefined;
      return {
        ok: false,
        reason: gangShortReason(size, members.length, noAddress, last),
        permanent: false,
      };
    }
    // Room-making planned for one member stays that member's: the next ones go elsewhere.
    members.push({ ...plan, gangAddress: address.get(plan.agentId) as string });
    taken.add(plan.agentId);
  }
  return { ok: true, members };
}

/** input asking for `want` instead; its lazily read lists (the planner's ReserveInput getters) stay lazy. */
function withWant(input: PlanInput, want: PlanRequest): PlanInput {
  return {
    get agents() {
      return input.agents;
    },
    get held() {
      return input.held;
    },
    get idle() {
      return input.idle;
    },
    get preemptible() {
      return input.preemptible;
    },
    ...(input.leaving ? { leaving: input.leaving } : {}),
    ...(input.index ? { index: input.index } : {}),
    ...(input.usageOf ? { usageOf: input.usageOf } : {}),
    want,
  };
}

/**
 * The last resort: preempt running preemptible work of a lower priority than
 * the request. On each agent its idle containers go first, then its victims
 * lowest priority first (of equal ones the newest); the agent that needs the
 * fewest victims, then the fewest containers stopped in all, takes the
 * request. Nothing that is not preemptible, nor anything of the request's
 * own priority or higher, is ever chosen.
 */
function planPreemption(
  input: PlanInput,
  /** The request as the limits leave it (GPU types at their limit left out). */
  req: PlacementRequest,
  viewWithout: (gone: Set<string>) => ReturnType<typeof buildClusterView>,
  idle: readonly IdleCandidate[],
  stop: ReadonlySet<string>,
): Plan | undefined {
  const priority = input.want.priority ?? 0;
  if (!input.preemptible?.length) return undefined;
  const heldBy = new Map(input.held.map((h) => [h.id, h]));
  const victims = input.preemptible
    .filter((c) => c.priority < priority && heldBy.has(c.id) && !stop.has(c.id) && !input.leaving?.has(c.id))
    .sort((a, b) => a.priority - b.priority || b.startedAt - a.startedAt || a.id.localeCompare(b.id));
  if (victims.length === 0) return undefined;
  let best: { placed: Placement & { ok: true }; stop: Set<string>; preempt: string[] } | undefined;
  for (const agent of viewWithout(new Set(stop)).agents) {
    if (!agent.ready) continue;
    const onAgent = (id: string) => heldBy.get(id)?.agentId === agent.agentId;
    // The request placed on this agent alone, with `gone` stopped.
    const placeWithout = (gone: Set<string>) =>
      place({ agents: viewWithout(gone).agents.filter((a) => a.agentId === agent.agentId) }, req);
    const gone = new Set(stop);
    for (const c of idle) if (!stop.has(c.id) && onAgent(c.id)) gone.add(c.id);
    const preempt: string[] = [];
    for (const v of victims) {
      if (!onAgent(v.id)) continue;
      if (best && preempt.length >= best.preempt.length) break;
      gone.add(v.id);
      preempt.push(v.id);
      if (!placeWithout(gone).ok) continue;
      // Idle containers the victims' room makes unneeded stay.
      const stopped = new Set([...gone].filter((id) => !preempt.includes(id)));
      for (const id of [...stopped]) {
        if (stop.has(id)) continue;
        stopped.delete(id);
        if (!placeWithout(new Set([...stopped, ...preempt])).ok) stopped.add(id);
      }
      const final = placeWithout(new Set([...stopped, ...preempt]));
      if (!final.ok) continue; // cannot happen: every trim was checked
      const better =
        !best ||
        preempt.length < best.preempt.length ||
        (preempt.length === best.preempt.length && stopped.size < best.stop.size);
      if (better) best = { placed: final, stop: stopped, preempt: [...preempt] };
      break;
    }
  }
  if (!best) return undefined;
  return { ...planned(best.placed, best.stop), preempt: best.preempt };
}

function planned(p: Placement & { ok: true }, stop: Set<string>): Extract<Plan, { ok: true }> {
  return {
    ok: true,
    agentId: p.agentId,
    ...(p.gpuType ? { gpuType: p.gpuType } : {}),
    ...(p.gpuUuid ? { gpuUuid: p.gpuUuid } : {}),
    stop: [...stop],
  };
}

/** The GPU types the fleet offers whole or shared (MIG slices left out: "any" never takes one). */
function fleetGpuTypes(agents: readonly LiveAgent[]): string[] {
  const types = new Set<string>();
  for (const a of agents) {
    const gpus = a.heartbeat.capacity.gpus;
    if (!gpus.available) continue;
    for (const d of gpus.devices) if (!d.mig) types.add(d.type);
  }
  return [...types].sort();
}
