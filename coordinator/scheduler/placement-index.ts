// An index over the fleet that makes place()'s decision without looking at
// every agent: the planner keeps it up to date (reservations added and
// removed, fleet changes read from the FleetView's change log), and for a
// placement within the workspace's limits it finds the few agents that can
// win and ranks them with place()'s own rankers and arithmetic
// (binPackScore, the same tie order by agent id), building no views. A
// refusal, or a plan that must stop idle containers, is left to
// planPlacement()'s whole-fleet path. test/scheduler/planner-equivalence
// .test.ts and placement-index.test.ts hold its decisions to place() on the
// whole fleet.
//
// Agents with the same GPU inventory (types and counts) form a group; inside
// a group they are sorted by how full they are (the bin-packing ranker's
// request-independent part), fullest first, in blocks and runs of blocks
// (placement-blocks.ts) that remember the Pareto front of their free (CPU,
// memory) and their largest free GPU counts, so runs and blocks without
// room are skipped whole (a front left over-generous by a departure is
// recounted when a scan finds it promised too much). For a request the
// first fitting agent of each group bounds the best score any other agent of
// the group can reach; every agent within that bound (with a margin for
// rounding) is a candidate, and the winner among them is scored exactly.
// Free room is summed over the same reservations in the same order as
// buildClusterView() sums them (each agent's map keeps the planner's
// insertion order), so "fits" is place()'s to the bit. Agents whose totals
// and free room are all equal score the same, and only the first of them
// (place()'s tie order) is kept.

import { gpuSchedulingType, type HostCapacity, isMigSliceType } from "../../shared/fleet.ts";
import type { FleetView, LiveAgent } from "../fleet/index.ts";
import { totalResources } from "./cluster-view.ts";
import {
  type Entry,
  type Group,
  type HeldHere as Held,
  IdOrder,
  frontFits,
  insertEntry,
  recount,
  remax,
  unplaceEntry,
} from "./placement-blocks.ts";
import { type PlacementRequest, binPackScore, checkRequest } from "./place.ts";

/** The index's decision: place()'s own on the whole fleet. */
export type IndexedPlacement = { ok: true; agentId: string; gpuType?: string };

const usedShare = (total: number, free: number) => (total > 0 ? (total - free) / total : 1);

/** Equal totals and free room: place() scores the two alike for any request. */
const scoresAlike = (a: Entry, b: Entry) =>
  a.freeCpu === b.freeCpu &&
  a.freeMem === b.freeMem &&
  a.totalCpu === b.totalCpu &&
  a.totalMem === b.totalMem;

/** What the request adds to binPack's score on an agent of these totals. */
const requestShare = (req: PlacementRequest, cpu: number, mem: number) =>
  ((cpu > 0 ? req.cpuMillicores / cpu : 0) + (mem > 0 ? req.memoryBytes / mem : 0)) / 2;

export class PlacementIndex {
  private readonly entries = new Map<string, Entry>();
  private readonly groups = new Map<string, Group>();
  /** Reservations on agents the index does not hold (not ready, unknown yet). */
  private readonly parked = new Map<string, Map<string, Held>>();
  private seen = -1;
  /** Agent ids as numbers in localeCompare's order, for the blocks' sort. */
  private readonly order = new IdOrder();
  private orderSeen = 0;
  /** The groups with and without GPUs, rebuilt when a group is added. */
  private cpuGroups: Group[] = [];
  private gpuGroups: Group[] = [];
  /** Reused by scan(): the entries taken in one group, to skip others that would score the same. */
  private readonly taken: Entry[] = [];
  /** Reused by place(): the candidates of one tier. */
  private readonly found: Entry[] = [];

  constructor(private readonly fleet: FleetView) {}

  /** Reads the fleet's changes since the last call. */
  sync(): void {
    const version = this.fleet.version;
    if (version === this.seen) return;
    const changed = this.seen < 0 ? undefined : this.fleet.changedSince(this.seen);
    this.seen = version;
    if (changed === undefined) {
      const live = new Set<string>();
      for (const a of this.fleet.list()) {
        live.add(a.agentId);
        this.refreshAgent(a);
      }
      for (const id of [...this.entries.keys()]) if (!live.has(id)) this.dropAgent(id);
      return;
    }
    for (const id of new Set(changed)) {
      const a = this.fleet.get(id);
      if (a) this.refreshAgent(a);
      else this.dropAgent(id);
    }
  }

  add(h: Held): void {
    const e = this.entries.get(h.agentId);
    if (!e) {
      const map = this.parked.get(h.agentId) ?? new Map<string, Held>();
      map.set(h.id, h);
      this.parked.set(h.agentId, map);
      return;
    }
    unplaceEntry(e);
    e.held.set(h.id, h);
    this.recompute(e);
    insertEntry(e);
  }

  remove(h: Held): void {
    const e = this.entries.get(h.agentId);
    if (!e) {
      this.parked.get(h.agentId)?.delete(h.id);
      return;
    }
    if (!e.held.has(h.id)) return;
    unplaceEntry(e);
    e.held.delete(h.id);
    this.recompute(e);
    insertEntry(e);
  }

  /** A reservation changed in place (its GPU devices became known): its agent's free room is counted again. */
  refresh(h: Held): void {
    const e = this.entries.get(h.agentId);
    if (!e?.held.has(h.id)) return;
    unplaceEntry(e);
    this.recompute(e);
    insertEntry(e);
  }

  /**
   * place()'s decision for `req` on the whole fleet, taken among the few
   * agents scan() names with place()'s own rankers and arithmetic (no views
   * built); undefined when no agent has room, the request is invalid, or a
   * tie only the fleet's order could break (place() on the full view then
   * decides).
   */
  place(req: PlacementRequest, ready: (agentId: string) => boolean): IndexedPlacement | undefined {
    // Shared-GPU requests are packed by memory, which the index does not keep: place() decides them.
    if (checkRequest(req) !== undefined || req.gpuMemoryMiB !== undefined) return undefined;
    const tiers = req.gpuTypes.length > 0 ? req.gpuTypes : ANY_TIER;
    const found = this.found;
    for (const tier of tiers) {
      // CPU work ranks hosts without GPUs first: GPU hosts are looked at only when none of those fits.
      for (let pass = req.gpuCount > 0 ? 1 : 0; pass < 2; pass++) {
        const groups = pass === 0 ? this.cpuGroups : this.gpuGroups;
        found.length = 0;
        for (const g of groups) this.scan(g, req, tier, ready, found);
        if (found.length === 0) continue;
        const prefer = req.preferAgents;
        if (prefer)
          for (const id of prefer) {
            const e = this.entries.get(id);
            if (e && !found.includes(e) && this.fits(e, req, tier) && ready(id)) found.push(e);
          }
        const best = bestOf(found, req);
        found.length = 0;
        if (!best) return undefined;
        if (req.gpuCount <= 0) return { ok: true, agentId: best.id };
        const gpuType = smallestFittingType(best, req, tier);
        return gpuType ? { ok: true, agentId: best.id, gpuType } : undefined;
      }
    }
    return undefined;
  }

  private scan(
    g: Group,
    req: PlacementRequest,
    tier: string | undefined,
    ready: (agentId: string) => boolean,
    found: Entry[],
  ): void {
    const want = gpuSlots(g, req, tier);
    if (want === undefined) return;
    let floor = Number.NEGATIVE_INFINITY;
    const seen = this.taken;
    seen.length = 0;
    // The most a request can add to any member's score: its share of the smallest totals.
    const maxShare = requestShare(req, g.minCpu, g.minMem);
    const cpu = req.cpuMillicores;
    const mem = req.memoryBytes;
    for (const run of g.runs) {
      if ((run.blocks[0]?.entries[0]?.used ?? Number.NEGATIVE_INFINITY) < floor) return;
      if (!frontFits(run.front, cpu, mem)) continue;
      if (want.length > 0 && !anyAtLeast(run.maxGpu, want, req.gpuCount)) continue;
      let runRoomy = false;
      for (const b of run.blocks) {
        if ((b.entries[0]?.used ?? Number.NEGATIVE_INFINITY) < floor) return;
        if (!frontFits(b.front, cpu, mem)) continue;
        if (want.length > 0 && !anyAtLeast(b.maxGpu, want, req.gpuCount)) continue;
        let roomy = false;
        for (const e of b.entries) {
          if (e.used < floor) return;
          if (e.freeCpu < cpu || e.freeMem < mem) continue;
          if (want.length > 0 && !anyAtLeast(e.freeGpu, want, req.gpuCount)) continue;
          roomy = true;
          if (alikeTaken(seen, e) || !ready(e.id)) continue;
          seen.push(e);
          found.push(e);
          if (floor === Number.NEGATIVE_INFINITY)
            floor = e.used + requestShare(req, e.totalCpu, e.totalMem) - maxShare - 1e-9;
        }
        // A front that promised room no entry has is out of date: recounted once, not on every departure.
        if (roomy) runRoomy = true;
        else if (b.stale) remax(b);
      }
      if (!runRoomy && run.stale) recount(run);
    }
  }

  private fits(e: Entry, req: PlacementRequest, tier: string | undefined): boolean {
    if (e.freeCpu < req.cpuMillicores || e.freeMem < req.memoryBytes) return false;
    const want = gpuSlots(e.group, req, tier);
    if (want === undefined) return false;
    return want.length === 0 || anyAtLeast(e.freeGpu, want, req.gpuCount);
  }

  private refreshAgent(a: LiveAgent): void {
    const old = this.entries.get(a.agentId);
    if (a.state !== "ready") {
      if (old) this.dropAgent(a.agentId);
      return;
    }
    if (old && sameTotals(old.agent.heartbeat.capacity, a.heartbeat.capacity)) {
      old.agent = a;
      return;
    }
    const total = totalResources(a.heartbeat.capacity);
    const types = Object.keys(total.gpus).sort();
    const held = old ? old.held : (this.parked.get(a.agentId) ?? new Map<string, Held>());
    if (old) this.dropAgent(a.agentId);
    this.parked.delete(a.agentId);
    const sharedGpus = total.shared?.length ?? 0;
    const groupKey = `${types.map((t) => `${t}:${total.gpus[t]?.length ?? 0}`).join(",")}|${sharedGpus}`;
    let group = this.groups.get(groupKey);
    if (!group) {
      group = {
        types,
        upperTypes: types.map((t) => t.toUpperCase()),
        // "Any GPU" means a whole one: MIG slices are never among its slots.
        allSlots: types.flatMap((t, i) => (isMigSliceType(t) ? [] : [i])),
        // A host with shared GPUs only is a GPU host too (CPU work goes elsewhere first, as in place()).
        hasGpu: sharedGpus > 0 || types.some((t) => (total.gpus[t]?.length ?? 0) > 0),
        runs: [],
        members: new Set(),
        minCpu: 0,
        minMem: 0,
      };
      this.groups.set(groupKey, group);
      this.cpuGroups = [...this.groups.values()].filter((g) => !g.hasGpu);
      this.gpuGroups = [...this.groups.values()].filter((g) => g.hasGpu);
    }
    const rank = this.order.rankOf(a.agentId);
    if (this.order.version !== this.orderSeen) {
      // Numbered afresh (their order unchanged, so every block stays sorted).
      this.orderSeen = this.order.version;
      for (const other of this.entries.values()) other.rank = this.order.rankOf(other.id);
    }
    const e: Entry = {
      agent: a,
      id: a.agentId,
      rank,
      group,
      totalCpu: total.cpuMillicores,
      totalMem: total.memoryBytes,
      uuids: types.map((t) => total.gpus[t] ?? []),
      held,
      freeCpu: 0,
      freeMem: 0,
      freeGpu: [],
      used: 0,
    };
    this.entries.set(a.agentId, e);
    group.members.add(e);
    if (e.totalCpu > 0 && (group.minCpu === 0 || e.totalCpu < group.minCpu)) group.minCpu = e.totalCpu;
    if (e.totalMem > 0 && (group.minMem === 0 || e.totalMem < group.minMem)) group.minMem = e.totalMem;
    this.recompute(e);
    insertEntry(e);
  }

  private dropAgent(agentId: string): void {
    const e = this.entries.get(agentId);
    if (!e) return;
    unplaceEntry(e);
    this.entries.delete(agentId);
    e.group.members.delete(e);
    this.groupTotals(e.group);
    // Numbered again if it comes back: ids of agents gone for good must not pile up.
    this.order.forget(agentId);
    // Its reservations stay known, for when it is back.
    if (e.held.size > 0) this.parked.set(agentId, e.held);
  }

  private groupTotals(g: Group): void {
    let cpu = Number.POSITIVE_INFINITY;
    let mem = Number.POSITIVE_INFINITY;
    for (const m of g.members) {
      if (m.totalCpu > 0) cpu = Math.min(cpu, m.totalCpu);
      if (m.totalMem > 0) mem = Math.min(mem, m.totalMem);
    }
    g.minCpu = Number.isFinite(cpu) ? cpu : 0;
    g.minMem = Number.isFinite(mem) ? mem : 0;
  }

  /** Free room as buildClusterView's subtract() computes it. */
  private recompute(e: Entry): void {
    let cpu = 0;
    let mem = 0;
    for (const r of e.held.values()) {
      cpu += r.cpuMillicores;
      mem += r.memoryBytes;
    }
    e.freeCpu = e.totalCpu - cpu;
    e.freeMem = e.totalMem - mem;
    if (e.group.types.length > 0) {
      const taken = new Set<string>();
      const pending = new Map<string, number>();
      for (const r of e.held.values()) {
        if (r.gpuUuids) for (const u of r.gpuUuids) taken.add(u);
        if (r.gpuType && r.gpuCount > 0 && !(r.gpuUuids && r.gpuUuids.length > 0))
          pending.set(r.gpuType, (pending.get(r.gpuType) ?? 0) + r.gpuCount);
      }
      e.freeGpu = e.group.types.map((t, i) => {
        const left = (e.uuids[i] ?? []).filter((u) => !taken.has(u)).length;
        return Math.max(0, left - (pending.get(t) ?? 0));
      });
    }
    e.used = (usedShare(e.totalCpu, e.freeCpu) + usedShare(e.totalMem, e.freeMem)) / 2;
  }
}

/** Whether two heartbeats report the same totals as totalResources() reads them (disk and the rest may differ). */
function sameTotals(a: HostCapacity, b: HostCapacity): boolean {
  if (a === b) return true;
  if (a.cpuCores !== b.cpuCores || a.memoryBytes !== b.memoryBytes || a.gpus.available !== b.gpus.available)
    return false;
  if (!a.gpus.available) return true;
  const da = a.gpus.devices;
  const db = b.gpus.devices;
  return (
    da.length === db.length &&
    da.every((d, i) => {
      const o = db[i];
      return (
        o !== undefined &&
        d.uuid === o.uuid &&
        gpuSchedulingType(d) === gpuSchedulingType(o) &&
        !!d.shared === !!o.shared &&
        d.memoryMiB === o.memoryMiB
      );
    })
  );
}

/**
 * The group's GPU type positions that may serve the request's tier: [] for
 * a request without GPUs, undefined when none can (as fittingGpuType, the
 * wanted type matched case-insensitively).
 */
function gpuSlots(g: Group, req: PlacementRequest, tier: string | undefined): readonly number[] | undefined {
  if (req.gpuCount <= 0) return NO_SLOTS;
  if (!tier) return g.allSlots.length > 0 ? g.allSlots : undefined;
  const slots: number[] = [];
  const wanted = tier.toUpperCase();
  for (let i = 0; i < g.types.length; i++) if (g.upperTypes[i] === wanted) slots.push(i);
  return slots.length > 0 ? slots : undefined;
}

const NO_SLOTS: readonly number[] = [];
const ANY_TIER: readonly (string | undefined)[] = [undefined];

function anyAtLeast(counts: readonly number[], slots: readonly number[], n: number): boolean {
  for (let k = 0; k < slots.length; k++) if ((counts[slots[k] as number] ?? 0) >= n) return true;
  return false;
}

function alikeTaken(taken: readonly Entry[], e: Entry): boolean {
  for (let k = 0; k < taken.length; k++) if (scoresAlike(taken[k] as Entry, e)) return true;
  return false;
}

/**
 * rank()'s winner among the candidates: hosts without GPUs first for CPU
 * work, then preferred agents, then binPack's score, then the agent id by
 * localeCompare. Undefined when two ids compare equal there (only the
 * fleet's order would break that tie).
 */
function bestOf(found: readonly Entry[], req: PlacementRequest): Entry | undefined {
  let best: Entry | undefined;
  let bestAvoid = 0;
  let bestPref = 0;
  let bestScore = 0;
  const prefer = req.preferAgents;
  for (let k = 0; k < found.length; k++) {
    const e = found[k] as Entry;
    const avoid = req.gpuCount > 0 || !e.group.hasGpu ? 1 : 0;
    const pref = prefer?.includes(e.id) ? 1 : 0;
    const score = binPackScore(e.totalCpu, e.freeCpu, e.totalMem, e.freeMem, req);
    if (best) {
      if (avoid !== bestAvoid) {
        if (avoid < bestAvoid) continue;
      } else if (pref !== bestPref) {
        if (pref < bestPref) continue;
      } else if (score !== bestScore) {
        if (score < bestScore) continue;
      } else {
        const c = e.id.localeCompare(best.id);
        if (c === 0) return undefined;
        if (c > 0) continue;
      }
    }
    best = e;
    bestAvoid = avoid;
    bestPref = pref;
    bestScore = score;
  }
  return best;
}

/**
 * fittingGpuType on the agent's free devices: of the types the tier allows
 * with enough free, the one with the fewest (so big boxes stay whole), then
 * by name; undefined when none fits or two names compare equal.
 */
function smallestFittingType(e: Entry, req: PlacementRequest, tier: string | undefined): string | undefined {
  const types = e.group.types;
  const wanted = tier ? tier.toUpperCase() : undefined;
  let best = -1;
  for (let i = 0; i < types.length; i++) {
    const free = e.freeGpu[i] ?? 0;
    if (free < req.gpuCount) continue;
    if (wanted !== undefined ? e.group.upperTypes[i] !== wanted : isMigSliceType(types[i] as string))
      continue;
    if (best >= 0) {
      const bestFree = e.freeGpu[best] ?? 0;
      if (free > bestFree) continue;
      if (free === bestFree) {
        const c = (types[i] as string).localeCompare(types[best] as string);
        if (c === 0) return undefined;
        if (c > 0) continue;
      }
    }
    best = i;
  }
  return best >= 0 ? types[best] : undefined;
}
