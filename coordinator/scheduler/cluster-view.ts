// What the scheduler sees: each agent's total capacity and what is still free
// after the containers the coordinator already placed there. Built from the
// live fleet (heartbeats) plus the coordinator's own reservations.

import { gpuSchedulingType, type Heartbeat, type HostCapacity, poolOf } from "../../shared/fleet.ts";
import type { LiveAgent } from "../fleet/index.ts";

export interface Resources {
  cpuMillicores: number;
  memoryBytes: number;
  /**
   * GPU uuids by scheduling type, e.g. { H100: ["GPU-1", "GPU-2"] }; MIG
   * slices under type and profile ({ "A100:1g.10gb": ["MIG-1"] }), so a
   * whole-GPU type never names a slice.
   */
  gpus: Record<string, string[]>;
  /**
   * GPUs the operator marked shareable (`berth agent --shared-gpus`): held
   * by memory, several containers each, and never in `gpus` (a whole-GPU
   * request never takes one). Absent when the agent shares none.
   */
  shared?: SharedGpu[];
}

/** A shareable GPU and how much of its memory the reservations leave. */
export interface SharedGpu {
  uuid: string;
  /** nvidia-smi's index on its host: of equal fits the lowest is taken, as the agent picks. */
  index: number;
  /** Its scheduling type, e.g. "H200". */
  type: string;
  memoryMiB: number;
  freeMiB: number;
}

export interface AgentView {
  agentId: string;
  /** Its pool (`berth agent --pool`). @default DEFAULT_POOL */
  pool?: string;
  /** Accepts new containers now. Agents that are not may still prove a request fits some day. */
  ready: boolean;
  total: Resources;
  free: Resources;
  /** Where other agents reach it for a gang's network (gangAddressOf); absent: it takes no gang of several hosts. */
  gangAddress?: string;
}

export interface ClusterView {
  agents: AgentView[];
}

/** What one placed container holds on its agent until it exits. */
export interface Reservation {
  agentId: string;
  cpuMillicores: number;
  memoryBytes: number;
  /** The type the scheduler chose; the agent picks the devices. */
  gpuType?: string;
  gpuCount: number;
  /** The devices the agent assigned, once known (for a shared GPU: the one the planner chose, at once). */
  gpuUuids?: string[];
  /** Set when it holds part of a shared GPU: the MiB of its memory. */
  gpuMemoryMiB?: number;
  /** Whose container holds it (workspace limits count it); placement ignores it. */
  workspaceId?: string;
}

/**
 * The address other agents reach the agent at, for the VXLAN tunnels of a
 * gang (shared/gang.ts): its nodeAddress, else the host of its grpcAddress
 * unless that is loopback or unspecified (other hosts could not reach it
 * there). Undefined: the agent takes no gang member.
 */
export function gangAddressOf(hb: Pick<Heartbeat, "nodeAddress" | "grpcAddress">): string | undefined {
  const node = hb.nodeAddress?.trim();
  if (node) return node;
  const host = hostOf(hb.grpcAddress ?? "");
  if (!host || /^(localhost|127\.|::1$|0\.0\.0\.0$|::$)/i.test(host)) return undefined;
  return host;
}

/** The host of "host:port" or "[v6]:port"; a bare host as it is. */
function hostOf(addr: string): string {
  const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(addr);
  if (v6) return v6[1] ?? "";
  const i = addr.lastIndexOf(":");
  // More than one colon without brackets: a bare IPv6 address.
  if (i < 0 || addr.indexOf(":") !== i) return addr;
  return addr.slice(0, i);
}

/** Total resources of a host as its heartbeat reports them; GPUs only when the agent offers them. */
export function totalResources(capacity: HostCapacity): Resources {
  const gpus: Record<string, string[]> = {};
  const shared: SharedGpu[] = [];
  if (capacity.gpus.available) {
    for (const d of capacity.gpus.devices) {
      if (d.shared) {
        shared.push({
          uuid: d.uuid,
          index: d.index,
          type: d.type,
          memoryMiB: d.memoryMiB,
          freeMiB: d.memoryMiB,
        });
        continue;
      }
      const type = gpuSchedulingType(d);
      gpus[type] = [...(gpus[type] ?? []), d.uuid];
    }
  }
  return {
    cpuMillicores: Math.round(capacity.cpuCores * 1000),
    memoryBytes: capacity.memoryBytes,
    gpus,
    ...(shared.length > 0 ? { shared } : {}),
  };
}

/**
 * What the reservations leave of each shared GPU. A reservation on one whose
 * memory share is not known (read back from an older agent) holds it whole.
 */
function subtractShared(total: SharedGpu[], held: Reservation[]): SharedGpu[] {
  return total.map((g) => {
    let used = 0;
    for (const r of held) {
      if (!r.gpuUuids?.includes(g.uuid)) continue;
      used += r.gpuMemoryMiB ?? g.memoryMiB;
    }
    return { ...g, freeMiB: Math.max(0, g.memoryMiB - used) };
  });
}

function subtract(total: Resources, held: Reservation[]): Resources {
  const gpus: Record<string, string[]> = {};
  const taken = new Set(held.flatMap((r) => r.gpuUuids ?? []));
  for (const [type, uuids] of Object.entries(total.gpus)) gpus[type] = uuids.filter((u) => !taken.has(u));
  // Reservations whose devices are not known yet hold "some" GPUs of their type.
  for (const r of held) {
    if (!r.gpuType || r.gpuCount <= 0 || (r.gpuUuids && r.gpuUuids.length > 0)) continue;
    const left = gpus[r.gpuType];
    if (left) gpus[r.gpuType] = left.slice(Math.min(r.gpuCount, left.length));
  }
  return {
    cpuMillicores: total.cpuMillicores - held.reduce((s, r) => s + r.cpuMillicores, 0),
    memoryBytes: total.memoryBytes - held.reduce((s, r) => s + r.memoryBytes, 0),
    gpus,
    ...(total.shared ? { shared: subtractShared(total.shared, held) } : {}),
  };
}

/**
 * The cluster as placement sees it: every fleet-ready agent, with what the
 * coordinator's reservations leave free. `schedulable` may hold agents back
 * (e.g. until the coordinator knows which containers already run there).
 */
export function buildClusterView(
  agents: LiveAgent[],
  reservations: Iterable<Reservation>,
  schedulable: (agentId: string) => boolean = () => true,
): ClusterView {
  const byAgent = new Map<string, Reservation[]>();
  for (const r of reservations) {
    const list = byAgent.get(r.agentId);
    if (list) list.push(r);
    else byAgent.set(r.agentId, [r]);
  }
  const out: AgentView[] = [];
  for (const a of agents) {
    if (a.state !== "ready") continue;
    const total = totalResources(a.heartbeat.capacity);
    const gang = gangAddressOf(a.heartbeat);
    out.push({
      agentId: a.agentId,
      pool: poolOf(a.heartbeat),
      ready: schedulable(a.agentId),
      total,
      free: subtract(total, byAgent.get(a.agentId) ?? []),
      ...(gang ? { gangAddress: gang } : {}),
    });
  }
  return { agents: out };
}

/** The type of each GPU uuid an agent reports, for reservations read back from containers. */
export function gpuTypeOf(view: AgentView, uuid: string): string | undefined {
  for (const [type, uuids] of Object.entries(view.total.gpus)) if (uuids.includes(uuid)) return type;
  return view.total.shared?.find((g) => g.uuid === uuid)?.type;
}
