// The one planner: it owns every reservation on every agent, whoever's
// container holds it (runner containers of the container manager, sandboxes
// and pods of the sandbox service, later image builds), so nothing is booked
// twice and workspace usage has one source. reserve() is synchronous: it
// plans with the pure planPlacement() and commits the plan at once; idle
// warm containers the plan stops are stopped by their owner, and the new
// container starts once they are gone (whenReady). reserveWithin() is the
// bounded wait of interactive callers: released room wakes it.

import { BerthError } from "../../shared/errors.ts";
import type { FleetView, LiveAgent } from "../fleet/index.ts";
import {
  type Held,
  type IdleCandidate,
  type Plan,
  type PlanInput,
  type PlanRequest,
  type PreemptCandidate,
  planGang,
  planPlacement,
} from "./plan.ts";
import { PlacementIndex } from "./placement-index.ts";
import { NO_USAGE, type WorkspaceUsage, addGpusByType, subtractUsage, usageOf } from "./quota.ts";

/** An owner of containers (the container manager): what it may stop to make room, and how. */
export interface ContainerOwner {
  /** Its containers that are idle warm ones now (no task in flight, only kept by keep_warm_seconds). */
  idle(): IdleCandidate[];
  /** Stops these to make room; each is released (Planner.release) once gone. */
  stop(ids: string[], reason: string): void;
  /** Whether the owner knows its containers on the agent yet (none is placed there before). @default true */
  synced?(agentId: string): boolean;
  /** Its running containers whose work may be preempted (their stubs are `preemptible`), at their priority. @default none */
  preemptible?(): PreemptCandidate[];
  /**
   * Preempts these for a higher-priority request: SIGTERM, a grace period,
   * their work requeued; each is released once gone. @default stop()
   */
  preempt?(ids: string[], reason: string): void;
}

export interface ReserveRequest extends PlanRequest {
  /** The container id the reservation is kept under. */
  id: string;
  kind: string;
}

export type ReserveResult =
  | {
      ok: true;
      reservation: Held;
      /** Idle containers being stopped for it: start the container after whenReady(). */
      stopping: string[];
    }
  | Extract<Plan, { ok: false }>;

/** A committed gang: each rank's reservation (index = rank) and the address its agent is reached at. */
export type GangReserveResult =
  | {
      ok: true;
      members: (Extract<ReserveResult, { ok: true }> & { gangAddress: string })[];
    }
  | Extract<Plan, { ok: false }>;

export interface PlannerOptions {
  fleet: FleetView;
}

export interface WaitOptions {
  /** The longest wait for room, in ms; 0 refuses at once. */
  waitMs: number;
  /** Named in errors: "the sandbox", "the pod". */
  what: string;
  /** Called when the request starts waiting, and again when its reason changes. */
  onWait?: (reason: string) => void;
  /** How often the fleet is looked at again while waiting (agents join, heartbeats change). @default 1000 */
  pollMs?: number;
}

export class Planner {
  private readonly held = new Map<string, Held>();
  /** What each workspace's reservations hold together (those being stopped included), for limits. */
  private readonly byWorkspace = new Map<string, WorkspaceUsage>();
  /** The fleet and the reservations, indexed so a placement need not look at every agent. */
  private readonly index: PlacementIndex;
  /** Victims being stopped, and the reservation each makes room for. */
  private readonly yielding = new Map<string, string>();
  /** Reservations waiting for their victims to go. */
  private readonly waitingOn = new Map<string, Set<string>>();
  private readonly readyWaiters = new Map<string, (() => void)[]>();
  private readonly owners = new Set<ContainerOwner>();
  private readonly listeners = new Set<() => void>();

  constructor(private readonly o: PlannerOptions) {
    this.index = new PlacementIndex(o.fleet);
  }

  private hold(h: Held): void {
    this.held.set(h.id, h);
    // Kept in place: one reservation in, one out, without new objects on the placement path.
    const u = this.byWorkspace.get(h.workspaceId);
    if (u) addInto(u, h, 1);
    else this.byWorkspace.set(h.workspaceId, usageOf([h]));
    this.index.add(h);
  }

  private unhold(h: Held): void {
    this.held.delete(h.id);
    const u = this.byWorkspace.get(h.workspaceId);
    if (u) {
      addInto(u, h, -1);
      if (u.containers === 0) this.byWorkspace.delete(h.workspaceId);
    }
    this.index.remove(h);
  }

  /** Registers an owner whose idle containers may make room. Returns an unregister. */
  addOwner(owner: ContainerOwner): () => void {
    this.owners.add(owner);
    return () => this.removeOwner(owner);
  }

  removeOwner(owner: ContainerOwner): void {
    this.owners.delete(owner);
  }

  /** Calls `listener` whenever room is released. Returns an unsubscribe. */
  onRelease(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Places and commits one container, or says why not. A plan that stops
   * idle containers commits at once (the room is this request's) and asks
   * their owners to stop them.
   */
  reserve(r: ReserveRequest): ReserveResult {
    if (this.held.has(r.id))
      throw new BerthError("conflict", `container ${r.id} already holds a reservation`);
    const input = this.inputFor(r);
    const plan = planPlacement(input);
    if (!plan.ok) return plan;
    const reservation: Held = {
      id: r.id,
      kind: r.kind,
      workspaceId: r.workspaceId,
      agentId: plan.agentId,
      cpuMillicores: r.placement.cpuMillicores,
      memoryBytes: r.placement.memoryBytes,
      gpuCount: r.placement.gpuCount,
    };
    if (r.stubId) reservation.stubId = r.stubId;
    if (plan.gpuType) reservation.gpuType = plan.gpuType;
    // A share of a shared GPU holds its memory on the GPU the planner chose from the start.
    if (plan.gpuUuid && r.placement.gpuMemoryMiB !== undefined) {
      reservation.gpuUuids = [plan.gpuUuid];
      reservation.gpuMemoryMiB = r.placement.gpuMemoryMiB;
    }
    this.hold(reservation);
    const preempt = plan.preempt ?? [];
    if (plan.stop.length > 0 || preempt.length > 0) {
      this.waitingOn.set(r.id, new Set([...plan.stop, ...preempt]));
      for (const id of [...plan.stop, ...preempt]) this.yielding.set(id, r.id);
      const byOwner = (ids: string[]) => {
        const out = new Map<ContainerOwner, string[]>();
        for (const id of ids) {
          const owner = input.ownerOf.get(id);
          if (owner) out.set(owner, [...(out.get(owner) ?? []), id]);
        }
        return out;
      };
      const why = `making room on ${plan.agentId} for ${r.kind} ${r.id}`;
      for (const [owner, ids] of byOwner(plan.stop)) owner.stop(ids, why);
      const preempting = `preempted on ${plan.agentId} for ${r.kind} ${r.id} (priority ${r.priority ?? 0})`;
      for (const [owner, ids] of byOwner(preempt)) {
        if (owner.preempt) owner.preempt(ids, preempting);
        else owner.stop(ids, preempting);
      }
    }
    return { ok: true, reservation, stopping: [...plan.stop, ...preempt] };
  }

  /** What a plan for `r` reads: agents not synced by every owner are held back. */
  private inputFor(r: PlanRequest): ReserveInput {
    const owners = this.owners;
    const want: PlanRequest =
      owners.size === 0 && !r.schedulable
        ? r
        : {
            ...r,
            schedulable: (agentId: string) => {
              for (const o of owners) if (!(o.synced?.(agentId) ?? true)) return false;
              return r.schedulable?.(agentId) ?? true;
            },
          };
    this.index.sync();
    return new ReserveInput(this.o.fleet, this.held, owners, this.yielding, want, this.index, this.usageOf);
  }

  /**
   * Places and commits a gang (shared/gang.ts): one container per request
   * (index = rank; all of the same placement), each on its own agent that
   * has a gang address, all or none. The whole gang is planned first
   * (planGang, pure), so one that does not fit asks nobody to stop
   * anything; then each member is committed on its planned agent. Should a
   * commit still fail (the gang as a whole past a workspace limit), the
   * members committed in this call are released and nothing stays held.
   */
  reserveGang(members: ReserveRequest[]): GangReserveResult {
    const first = members[0];
    if (!first) throw new BerthError("invalid_request", "a gang needs at least one member");
    for (const m of members)
      if (this.held.has(m.id))
        throw new BerthError("conflict", `container ${m.id} already holds a reservation`);
    const plan = planGang(this.inputFor(first), members.length);
    if (!plan.ok) return plan;
    const made: Extract<GangReserveResult, { ok: true }>["members"] = [];
    for (const [rank, m] of members.entries()) {
      const at = plan.members[rank];
      const res = at
        ? this.reserve({ ...m, schedulable: (id) => id === at.agentId && (m.schedulable?.(id) ?? true) })
        : undefined;
      if (!at || !res?.ok) {
        for (const done of made) this.release(done.reservation.id);
        const why = res && !res.ok ? res.reason : "no plan for it";
        return {
          ok: false,
          reason: `a gang of ${members.length} cannot be placed whole: rank ${rank}: ${why}`,
          permanent: false,
          ...(res && !res.ok && res.limit ? { limit: res.limit } : {}),
        };
      }
      made.push({ ...res, gangAddress: at.gangAddress });
    }
    return { ok: true, members: made };
  }

  /** Records a container that already runs (found on an agent at start); an existing reservation is updated. */
  adopt(h: Held): void {
    const had = this.held.get(h.id);
    if (had) {
      if (h.gpuUuids) this.assignGpus(h.id, h.gpuUuids);
      return;
    }
    this.hold({ ...h });
  }

  /** The devices the agent assigned, once its answer came. */
  assignGpus(id: string, uuids: string[]): void {
    const h = this.held.get(id);
    if (!h) return;
    h.gpuUuids = uuids;
    this.index.refresh(h);
  }

  /** The container is gone (or will not start): its room is free. Unknown ids are ignored. */
  release(id: string): void {
    const h = this.held.get(id);
    if (!h) return;
    this.unhold(h);
    const forId = this.yielding.get(id);
    this.yielding.delete(id);
    if (forId) {
      const left = this.waitingOn.get(forId);
      left?.delete(id);
      if (left && left.size === 0) this.ready(forId);
    }
    // A reservation given up before its victims went: they may make room for others again.
    const victims = this.waitingOn.get(id);
    if (victims) {
      for (const v of victims) if (this.yielding.get(v) === id) this.yielding.delete(v);
      this.ready(id);
    }
    for (const l of this.listeners) {
      try {
        l();
      } catch {
        // A listener's failure is its own.
      }
    }
  }

  private ready(id: string): void {
    this.waitingOn.delete(id);
    const waiters = this.readyWaiters.get(id) ?? [];
    this.readyWaiters.delete(id);
    for (const w of waiters) w();
  }

  /**
   * Resolves once the idle containers stopped for this reservation are
   * gone (at once when there were none); rejects with resource_exhausted
   * after `timeoutMs`.
   */
  whenReady(id: string, timeoutMs: number): Promise<void> {
    if (!this.waitingOn.has(id)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        const list = this.readyWaiters.get(id);
        if (list)
          this.readyWaiters.set(
            id,
            list.filter((w) => w !== done),
          );
        const left = [...(this.waitingOn.get(id) ?? [])].join(", ");
        reject(
          new BerthError(
            "resource_exhausted",
            `the idle containers stopped to make room (${left}) did not stop within ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.readyWaiters.set(id, [...(this.readyWaiters.get(id) ?? []), done]);
    });
  }

  /**
   * reserve(), waiting up to `waitMs` for room: released room (and a look
   * at the fleet every pollMs) tries again. Refusals that waiting cannot
   * help come at once: invalid or too big for every agent
   * (resource_exhausted), past a workspace limit (limit_exceeded). At the
   * deadline: resource_exhausted with the reason, or unavailable when no
   * agent is ready. The returned reservation's room is free to use.
   */
  async reserveWithin(r: ReserveRequest, w: WaitOptions): Promise<Held> {
    const deadline = Date.now() + w.waitMs;
    let lastReason: string | undefined;
    for (;;) {
      const res = this.reserve(r);
      if (res.ok) {
        if (res.stopping.length > 0) {
          try {
            await this.whenReady(r.id, Math.max(1, deadline - Date.now()));
          } catch (e) {
            this.release(r.id);
            throw e;
          }
        }
        return res.reservation;
      }
      if (res.limit)
        throw new BerthError("limit_exceeded", `cannot start ${w.what}: ${res.reason}`, { limit: res.limit });
      const left = deadline - Date.now();
      if (res.permanent || left <= 0) {
        const waited =
          w.waitMs > 0 && !res.permanent ? ` (waited ${Math.round(w.waitMs / 1000)} s for room)` : "";
        // permanent: no agent could hold it even empty (a GPU type the fleet lacks, too big), so waiting is pointless.
        throw new BerthError(
          res.noAgents ? "unavailable" : res.permanent ? "unplaceable" : "resource_exhausted",
          `cannot place ${w.what}: ${res.reason}${waited}`,
        );
      }
      if (res.reason !== lastReason) {
        lastReason = res.reason;
        w.onWait?.(res.reason);
      }
      await this.released(Math.min(left, w.pollMs ?? 1000));
    }
  }

  /** Resolves on the next release, or after `ms`. */
  private released(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        unsubscribe();
        resolve();
      };
      const timer = setTimeout(done, ms);
      const unsubscribe = this.onRelease(done);
    });
  }

  get(id: string): Held | undefined {
    return this.held.get(id);
  }

  /** Every reservation (of the kinds given), as the planner holds them. */
  list(kinds?: readonly string[]): Held[] {
    const all = [...this.held.values()];
    return kinds ? all.filter((h) => kinds.includes(h.kind)) : all;
  }

  /**
   * What the workspace's containers hold now, every kind together: what
   * its limits count. Containers being stopped to make room no longer
   * count (the reservation they make room for does).
   */
  usage(workspaceId: string): WorkspaceUsage {
    const u = this.usageNow(workspaceId);
    return u.gpusByType ? { ...u, gpusByType: { ...u.gpusByType } } : { ...u };
  }

  /** usage() without the copy, for the plan (which only reads it). */
  private readonly usageOf = (workspaceId: string): WorkspaceUsage => this.usageNow(workspaceId);

  private usageNow(workspaceId: string): WorkspaceUsage {
    const all = this.byWorkspace.get(workspaceId) ?? NO_USAGE;
    if (this.yielding.size === 0) return all;
    // Those being stopped are few: subtracted one by one rather than keeping a second count.
    const stopping: Held[] = [];
    for (const id of this.yielding.keys()) {
      const h = this.held.get(id);
      if (h?.workspaceId === workspaceId) stopping.push(h);
    }
    return stopping.length === 0 ? all : subtractUsage(all, usageOf(stopping));
  }
}

function addInto(u: WorkspaceUsage, h: Held, sign: 1 | -1): void {
  u.containers += sign;
  u.cpuMillicores += sign * h.cpuMillicores;
  u.memoryBytes += sign * h.memoryBytes;
  u.gpus += sign * h.gpuCount;
  if (h.gpuType && h.gpuCount > 0) addGpusByType(u, h.gpuType, sign * h.gpuCount);
}

/**
 * What reserve() hands planPlacement(): the fleet, the reservations and the
 * owners' idle containers are copied only when the plan reads them (the slow
 * paths: no room found by the index, idle containers to weigh).
 */
class ReserveInput implements PlanInput {
  /** Who offered each idle container read, to ask it to stop them. */
  readonly ownerOf = new Map<string, ContainerOwner>();
  private idleRead: IdleCandidate[] | undefined;
  private preemptibleRead: PreemptCandidate[] | undefined;

  constructor(
    private readonly fleet: FleetView,
    private readonly heldById: ReadonlyMap<string, Held>,
    private readonly owners: ReadonlySet<ContainerOwner>,
    /** Containers being stopped no longer count toward limits; their room is still theirs until they go. */
    readonly leaving: ReadonlyMap<string, string>,
    readonly want: PlanRequest,
    readonly index: PlacementIndex,
    readonly usageOf: (workspaceId: string) => WorkspaceUsage,
  ) {}

  private agentsRead: LiveAgent[] | undefined;
  private heldRead: Held[] | undefined;

  get agents(): LiveAgent[] {
    this.agentsRead ??= this.fleet.list();
    return this.agentsRead;
  }

  get held(): Held[] {
    this.heldRead ??= [...this.heldById.values()];
    return this.heldRead;
  }

  /** The owners' idle containers, asked for once and only when the plan needs them (a limit reached, no room anywhere). */
  get idle(): IdleCandidate[] {
    if (this.idleRead) return this.idleRead;
    const idle: IdleCandidate[] = [];
    for (const owner of this.owners) {
      for (const c of owner.idle()) {
        if (this.leaving.has(c.id) || !this.heldById.has(c.id)) continue;
        idle.push(c);
        this.ownerOf.set(c.id, owner);
      }
    }
    this.idleRead = idle;
    return idle;
  }

  /** The owners' preemptible containers, asked for only when nothing else makes room. */
  get preemptible(): PreemptCandidate[] {
    if (this.preemptibleRead) return this.preemptibleRead;
    const out: PreemptCandidate[] = [];
    for (const owner of this.owners) {
      for (const c of owner.preemptible?.() ?? []) {
        if (this.leaving.has(c.id) || !this.heldById.has(c.id)) continue;
        out.push(c);
        this.ownerOf.set(c.id, owner);
      }
    }
    this.preemptibleRead = out;
    return out;
  }
}
