// Placement, Nomad style: a pure function from the cluster view and one
// request to a decision. Filters drop agents that cannot take the request;
// rankers order the rest. The GPU priority list is the outer loop: every
// agent is tried for the first type before any agent for the next one.

import { DEFAULT_POOL, isMigSliceType } from "../../shared/fleet.ts";
import type { AgentView, ClusterView, Resources, SharedGpu } from "./cluster-view.ts";

export interface PlacementRequest {
  cpuMillicores: number;
  memoryBytes: number;
  /**
   * Acceptable GPU types, best first; empty = any whole GPU (when gpuCount >
   * 0). A MIG slice is asked for by type and profile ("A100:1g.10gb").
   */
  gpuTypes: string[];
  gpuCount: number;
  /**
   * Part of a shared GPU instead of whole ones: this many MiB of its memory
   * (`gpu_memory=`). Then gpuCount is 1 and only shared GPUs (of gpuTypes,
   * or any) may take it, packed best fit. @default whole GPUs
   */
  gpuMemoryMiB?: number;
  /** Agents that already hold what the container needs (code archive, image): preferred. */
  preferAgents?: string[];
  /** Only agents of this pool (`berth agent --pool`) may take it. @default any agent */
  pool?: string;
}

export type Placement =
  /** gpuUuid: the shared GPU chosen for a gpuMemoryMiB request. */
  | { ok: true; agentId: string; gpuType?: string; gpuUuid?: string }
  /** permanent: no agent in the fleet could fit it even when empty (too big, no such GPU type). */
  | { ok: false; reason: string; permanent: boolean };

// ---- filters -------------------------------------------------------------

export const fitsCpu = (r: Resources, req: PlacementRequest): boolean => r.cpuMillicores >= req.cpuMillicores;
export const fitsMemory = (r: Resources, req: PlacementRequest): boolean => r.memoryBytes >= req.memoryBytes;

/**
 * The agent's spelling of a GPU type that has `req.gpuCount` devices in `r`,
 * for one wanted type (matched case-insensitively) or, with `wanted`
 * undefined, any whole-GPU type (never a MIG slice): then the one with the
 * fewest devices that still fits, so big boxes stay whole. Undefined when
 * none fits.
 */
export function fittingGpuType(
  r: Resources,
  req: PlacementRequest,
  wanted: string | undefined,
): string | undefined {
  const fits = Object.entries(r.gpus)
    .filter(
      ([type, uuids]) =>
        uuids.length >= req.gpuCount && (wanted ? sameType(type, wanted) : !isMigSliceType(type)),
    )
    .sort(([ta, a], [tb, b]) => a.length - b.length || ta.localeCompare(tb));
  return fits[0]?.[0];
}

const sameType = (a: string, b: string) => a.toUpperCase() === b.toUpperCase();

/** The GPU tiers tried in order: each wanted type, or one "any" tier. */
function gpuTiers(req: PlacementRequest): (string | undefined)[] {
  return req.gpuTypes.length > 0 ? req.gpuTypes : [undefined];
}

/** Whether `r` has room for the request with one GPU tier; returns the GPU type chosen ("" for no GPU). */
function fits(r: Resources, req: PlacementRequest, tier: string | undefined): string | undefined {
  if (!fitsCpu(r, req) || !fitsMemory(r, req)) return undefined;
  if (req.gpuCount <= 0) return "";
  if (req.gpuMemoryMiB !== undefined) return bestSharedGpu(r, req, tier)?.type;
  return fittingGpuType(r, req, tier);
}

/**
 * Best fit among `r`'s shared GPUs of the tier (any type when undefined):
 * the one the request leaves the least free memory on, then the lowest index (as the agent picks), so
 * shared requests pack onto GPUs already in use and whole free GPUs stay.
 */
export function bestSharedGpu(
  r: Resources,
  req: PlacementRequest,
  tier: string | undefined,
): SharedGpu | undefined {
  const want = req.gpuMemoryMiB ?? 0;
  let best: SharedGpu | undefined;
  for (const g of r.shared ?? []) {
    if (g.freeMiB < want || (tier && !sameType(g.type, tier))) continue;
    if (!best || g.freeMiB < best.freeMiB || (g.freeMiB === best.freeMiB && g.index < best.index)) best = g;
  }
  return best;
}

// ---- rankers (higher is better; compared in order) ------------------------

type Ranker = (a: AgentView, req: PlacementRequest) => number;

/** Whole GPUs, slices and shared GPUs alike: any of them makes a GPU host. */
const gpuCount = (r: Resources) =>
  Object.values(r.gpus).reduce((s, u) => s + u.length, 0) + (r.shared?.length ?? 0);

/** CPU-only work goes to hosts without GPUs first, keeping GPU hosts for GPU work. */
export const avoidGpuHosts: Ranker = (a, req) => (req.gpuCount > 0 || gpuCount(a.total) === 0 ? 1 : 0);

/** Hosts that already hold the code archive or image start the container sooner. */
export const preferred: Ranker = (a, req) => (req.preferAgents?.includes(a.agentId) ? 1 : 0);

/**
 * Shared-GPU requests: the agent whose best-fitting shared GPU the request
 * fills most tightly (packing across agents as on one); 0 for all others.
 */
export const sharedFit: Ranker = (a, req) => {
  if (req.gpuMemoryMiB === undefined) return 0;
  let best = Number.NEGATIVE_INFINITY;
  for (const tier of gpuTiers(req)) {
    const g = bestSharedGpu(a.free, req, tier);
    if (g) best = Math.max(best, req.gpuMemoryMiB - g.freeMiB);
  }
  return best;
};

/**
 * Bin packing: the fuller the agent after placement (mean of its CPU and
 * memory use), the better, so large free blocks stay for large requests.
 */
export const binPack: Ranker = (a, req) =>
  binPackScore(a.total.cpuMillicores, a.free.cpuMillicores, a.total.memoryBytes, a.free.memoryBytes, req);

/** binPack on plain numbers: the placement index ranks with this very arithmetic, so its choice is place()'s to the bit. */
export function binPackScore(
  totalCpu: number,
  freeCpu: number,
  totalMem: number,
  freeMem: number,
  req: PlacementRequest,
): number {
  const cpu = totalCpu > 0 ? (totalCpu - freeCpu + req.cpuMillicores) / totalCpu : 1;
  const mem = totalMem > 0 ? (totalMem - freeMem + req.memoryBytes) / totalMem : 1;
  return (cpu + mem) / 2;
}

export const RANKERS: readonly Ranker[] = [avoidGpuHosts, preferred, sharedFit, binPack];

export function rank(
  agents: AgentView[],
  req: PlacementRequest,
  rankers: readonly Ranker[] = RANKERS,
): AgentView[] {
  const scored = agents.map((a) => ({ a, s: rankers.map((r) => r(a, req)) }));
  scored.sort((x, y) => {
    for (let i = 0; i < x.s.length; i++) {
      const d = (y.s[i] ?? 0) - (x.s[i] ?? 0);
      if (d !== 0) return d;
    }
    return x.a.agentId.localeCompare(y.a.agentId);
  });
  return scored.map((x) => x.a);
}

// ---- place ----------------------------------------------------------------

export function place(view: ClusterView, req: PlacementRequest): Placement {
  const invalid = checkRequest(req);
  if (invalid) return { ok: false, reason: invalid, permanent: true };
  if (view.agents.length === 0) return { ok: false, reason: "no agent is ready", permanent: false };
  if (req.pool !== undefined) {
    const pool = req.pool;
    const mine = view.agents.filter((a) => (a.pool ?? DEFAULT_POOL) === pool);
    if (mine.length === 0) return { ok: false, reason: noSuchPool(pool, view.agents), permanent: true };
    view = { agents: mine };
  }

  const ready = view.agents.filter((a) => a.ready);
  for (const tier of gpuTiers(req)) {
    const fitting = ready.filter((a) => fits(a.free, req, tier) !== undefined);
    const best = rank(fitting, req)[0];
    if (!best) continue;
    if (req.gpuMemoryMiB !== undefined) {
      const g = bestSharedGpu(best.free, req, tier)!;
      return { ok: true, agentId: best.agentId, gpuType: g.type, gpuUuid: g.uuid };
    }
    const gpuType = fits(best.free, req, tier);
    return gpuType ? { ok: true, agentId: best.agentId, gpuType } : { ok: true, agentId: best.agentId };
  }

  const everFits = view.agents.some((a) =>
    gpuTiers(req).some((tier) => fits(a.total, req, tier) !== undefined),
  );
  if (!everFits)
    return {
      ok: false,
      reason: `no agent can fit ${describeRequest(req)}; ${whyNever(view, req)}`,
      permanent: true,
    };
  // Which hosts could take it once free: says how many the request really waits on (a GPU type few have).
  const capable = ready.filter((a) => gpuTiers(req).some((tier) => fits(a.total, req, tier) !== undefined));
  return {
    ok: false,
    reason:
      ready.length === 0
        ? `no agent accepts containers right now (${view.agents.length} starting up)`
        : `every agent is full for ${describeRequest(req)} (${capable.length} of ${ready.length} ready agents can hold it when free); ${mostFree(capable.length > 0 ? capable : ready)}`,
    permanent: false,
  };
}

/**
 * Why a gang waits: how many hosts it needs, how many can take a member
 * now, and what holds the others back (no gang address, or the last
 * member's refusal).
 */
export function gangShortReason(size: number, able: number, noAddress: number, lastReason?: string): string {
  const why = [
    ...(noAddress > 0
      ? [`${noAddress} agent(s) have no node address for a gang's network (berth agent --node-address)`]
      : []),
    ...(lastReason && able > 0 ? [`the others: ${lastReason}`] : lastReason ? [lastReason] : []),
  ];
  return `a gang of ${size} needs ${size} hosts; ${able} can take it now${why.length > 0 ? ` (${why.join("; ")})` : ""}`;
}

/** An unknown pool: its name and the pools the fleet's ready agents are in. */
function noSuchPool(pool: string, agents: AgentView[]): string {
  const pools = [...new Set(agents.map((a) => a.pool ?? DEFAULT_POOL))].sort();
  return `no agent is in pool ${JSON.stringify(pool)} (the fleet has pools: ${pools.join(", ")})`;
}

/** Why the request itself is invalid (negative, not a number), or undefined. */
export function checkRequest(req: PlacementRequest): string | undefined {
  const bad = (n: number) => !Number.isFinite(n) || n < 0;
  if (bad(req.cpuMillicores)) return `cpu must be a non-negative number, got ${req.cpuMillicores / 1000}`;
  if (bad(req.memoryBytes)) return `memory must be a non-negative number, got ${req.memoryBytes} bytes`;
  if (!Number.isInteger(req.gpuCount) || req.gpuCount < 0)
    return `gpu count must be a whole number, got ${req.gpuCount}`;
  const slice = req.gpuTypes.find(isMigSliceType);
  // CUDA enumerates one MIG device per process: a container gets one slice.
  if (slice && req.gpuCount > 1)
    return `a MIG slice (${slice}) is requested one per container, got gpu_count=${req.gpuCount}`;
  if (req.gpuMemoryMiB !== undefined) {
    if (!Number.isInteger(req.gpuMemoryMiB) || req.gpuMemoryMiB <= 0)
      return `gpu_memory must be a positive whole number of MiB, got ${req.gpuMemoryMiB}`;
    if (req.gpuCount !== 1)
      return `gpu_memory asks for part of one shared GPU: gpu_count must be 1, got ${req.gpuCount}`;
    if (slice) return `gpu_memory shares a whole GPU; a MIG slice (${slice}) cannot be shared`;
  }
  return undefined;
}

/** Says which dimension no agent in the fleet reaches, or that none has them together. */
function whyNever(view: ClusterView, req: PlacementRequest): string {
  const agents = view.agents;
  const maxBy = (f: (a: AgentView) => number) => agents.reduce((m, a) => (f(a) > f(m) ? a : m));
  const reasons: string[] = [];
  if (!agents.some((a) => fitsCpu(a.total, req))) {
    const a = maxBy((x) => x.total.cpuMillicores);
    reasons.push(`the largest agent has cpu=${cores(a.total.cpuMillicores)} (${a.agentId})`);
  }
  if (!agents.some((a) => fitsMemory(a.total, req))) {
    const a = maxBy((x) => x.total.memoryBytes);
    reasons.push(`the largest agent has memory=${bytes(a.total.memoryBytes)} (${a.agentId})`);
  }
  if (req.gpuMemoryMiB !== undefined) {
    if (!agents.some((a) => gpuTiers(req).some((t) => bestSharedGpu(a.total, req, t))))
      reasons.push(
        `no agent has a shared GPU of type ${req.gpuTypes.length > 0 ? req.gpuTypes.join(" or ") : "any"} with ${bytes(req.gpuMemoryMiB * MiB)} of memory (fleet shared GPUs: ${fleetSharedGpus(agents) || "none; an operator shares GPUs with berth agent --shared-gpus"})`,
      );
  } else if (
    req.gpuCount > 0 &&
    !agents.some((a) => gpuTiers(req).some((t) => fittingGpuType(a.total, req, t)))
  ) {
    const fleet = fleetGpus(agents);
    reasons.push(
      `no agent has ${req.gpuCount} GPU(s) of type ${req.gpuTypes.length > 0 ? req.gpuTypes.join(" or ") : "any"} (fleet GPUs: ${fleet || "none"})`,
    );
  }
  if (reasons.length > 0) return reasons.join("; ");
  const a = maxBy((x) => x.total.cpuMillicores * 1e12 + x.total.memoryBytes);
  return `no single agent has all of it together; the largest is ${a.agentId} with ${describeResources(a.total)}`;
}

function mostFree(agents: AgentView[]): string {
  const a = agents.reduce((m, x) => (binPack(x, ZERO) < binPack(m, ZERO) ? x : m));
  return `the emptiest agent ${a.agentId} has ${describeResources(a.free)} free`;
}

const ZERO: PlacementRequest = { cpuMillicores: 0, memoryBytes: 0, gpuTypes: [], gpuCount: 0 };

const MiB = 1024 ** 2;

/** The fleet's shared GPUs by type and size, e.g. "2xH200 (140.4 GiB)". */
function fleetSharedGpus(agents: AgentView[]): string {
  const counts = new Map<string, number>();
  for (const a of agents)
    for (const g of a.total.shared ?? []) {
      const key = `${g.type} (${bytes(g.memoryMiB * MiB)})`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
  return [...counts].map(([k, n]) => `${n}x${k}`).join(", ");
}

function fleetGpus(agents: AgentView[]): string {
  const counts = new Map<string, number>();
  for (const a of agents)
    for (const [type, uuids] of Object.entries(a.total.gpus))
      counts.set(type, (counts.get(type) ?? 0) + uuids.length);
  return [...counts]
    .filter(([, n]) => n > 0)
    .map(([type, n]) => `${n}x${type}`)
    .join(", ");
}

const cores = (millicores: number) => `${Number((millicores / 1000).toFixed(3))}`;

export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number(v.toFixed(1))} ${units[i]}`;
}

export function describeRequest(req: PlacementRequest): string {
  const types = req.gpuTypes.length > 0 ? req.gpuTypes.join("|") : "any";
  const gpu =
    req.gpuMemoryMiB !== undefined
      ? ` gpu=${types} shared gpu_memory=${bytes(req.gpuMemoryMiB * MiB)}`
      : req.gpuCount > 0
        ? ` gpu=${req.gpuCount}x${types}`
        : "";
  return `cpu=${cores(req.cpuMillicores)} memory=${bytes(req.memoryBytes)}${gpu}`;
}

function describeResources(r: Resources): string {
  const gpus = Object.entries(r.gpus)
    .filter(([, u]) => u.length > 0)
    .map(([t, u]) => `${u.length}x${t}`)
    .join(",");
  const shared = (r.shared ?? []).map((g) => `${g.type}:${bytes(g.freeMiB * MiB)}`).join(",");
  return `cpu=${cores(r.cpuMillicores)} memory=${bytes(r.memoryBytes)}${gpus ? ` gpus=${gpus}` : ""}${shared ? ` shared_gpu_memory=${shared}` : ""}`;
}
