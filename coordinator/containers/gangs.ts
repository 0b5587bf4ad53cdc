// Gangs (shared/gang.ts, docs/gpus.md "Gang jobs across hosts"): a stub with
// extra.nodes = N > 1 runs each of its "containers" as N containers on N
// hosts, started together and ended together. Rank 0's runner takes the
// tasks and hands each to the other ranks, so for demand, keep-warm and
// counts the manager treats a gang as one unit; these helpers say which
// containers make one unit and name a gang's parts.

import { randomBytes, randomInt } from "node:crypto";
import type { GangMember } from "../../api/index.ts";
import { GangLabels } from "../../shared/gang.ts";

/** The gang's VNIs: below 4096 is left to VLAN-like uses on the hosts; 2^24 - 1 is VXLAN's largest. */
export const MIN_GANG_VNI = 4096;
export const MAX_GANG_VNI = 16_777_215;

/** A container's place in its gang; one found on an agent knows only what its labels say. */
export type GangPlace = Pick<GangMember, "id" | "rank" | "size"> & Partial<GangMember>;

/** Hosts in one container unit of the stub: extra.nodes when above 1, else 1 (no gang). */
export function gangSize(stub: { extra: { nodes?: number } }): number {
  const n = stub.extra.nodes;
  return n !== undefined && Number.isInteger(n) && n > 1 ? n : 1;
}

export function newGangId(): string {
  return `gang-${randomBytes(6).toString("hex")}`;
}

/**
 * A random VNI that no live gang uses (each gang's network is its own L2
 * segment between the hosts, named by its VNI). `pick` is for tests.
 */
export function pickVni(
  used: ReadonlySet<number>,
  pick: () => number = () => randomInt(MIN_GANG_VNI, MAX_GANG_VNI + 1),
): number {
  // 16.7 million values and a few live gangs: a clash is rare, a few tries end it.
  for (let i = 0; i < 64; i++) {
    const v = pick();
    if (!used.has(v)) return v;
  }
  for (let v = MIN_GANG_VNI; v <= MAX_GANG_VNI; v++) if (!used.has(v)) return v;
  throw new Error("every gang VNI is in use");
}

/** The unit a container belongs to: its gang, else itself. */
export function unitOf(c: { id: string; gang?: GangPlace }): string {
  return c.gang?.id ?? c.id;
}

/** How many units the containers make (a gang counts once). */
export function countUnits(cs: readonly { id: string; gang?: GangPlace }[]): number {
  return new Set(cs.map(unitOf)).size;
}

/** A gang member's place from its labels (a container found on an agent); undefined for one of no gang. */
export function gangFromLabels(labels: Record<string, string>, vniLabel: string): GangPlace | undefined {
  const id = labels[GangLabels.gangId];
  const rank = Number(labels[GangLabels.rank]);
  const size = Number(labels[GangLabels.size]);
  if (!id || !Number.isInteger(rank) || !Number.isInteger(size)) return undefined;
  const vni = Number(labels[vniLabel]);
  return { id, rank, size, ...(Number.isInteger(vni) && vni > 0 ? { vni } : {}) };
}

/** Why the rest of a gang is stopped, as logs and the stub's failures say it. */
export function gangEndMessage(gangId: string, rank: number, why: string): string {
  return `gang ${gangId}: rank ${rank} ${why}; the other ranks are stopped`;
}
