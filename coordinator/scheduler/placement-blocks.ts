// The placement index's sorted blocks (placement-index.ts): each group's
// agents in place()'s order (fullest first, then agent id as localeCompare
// orders it), cut into blocks that remember the Pareto front of their free
// (CPU, memory) and their largest free GPU counts. Kept without new objects
// on the placement path: a reservation in or out moves one entry, and the
// fronts and maxima are updated in place.

import type { LiveAgent } from "../fleet/fleet-view.ts";
import type { Reservation } from "./cluster-view.ts";

const BLOCK_MAX = 64;

export interface HeldHere extends Reservation {
  id: string;
}

export interface Entry {
  agent: LiveAgent;
  id: string;
  /** The id's place in localeCompare's order, as a number (IdOrder), so sorting compares no strings. */
  rank: number;
  group: Group;
  totalCpu: number;
  totalMem: number;
  /** Devices of each of the group's types, in the group's type order. */
  uuids: string[][];
  held: Map<string, HeldHere>;
  freeCpu: number;
  freeMem: number;
  freeGpu: number[];
  /** The sort key while inserted: the used share of CPU and memory, as binPack counts it. */
  used: number;
  block?: Block;
}

export interface Block {
  entries: Entry[];
  /**
   * The block's Pareto front of free (cpu, memory), as flat pairs by cpu
   * descending (memory then ascending): the block has room for a request
   * exactly when one of these points has.
   */
  front: number[];
  /** Entries left or changed since the front and maxima were computed: they may promise room no entry has. */
  stale: boolean;
  maxGpu: number[];
}

export interface Group {
  types: string[];
  /** The types upper-cased (place() matches a wanted type case-insensitively), and every position. */
  upperTypes: string[];
  allSlots: number[];
  hasGpu: boolean;
  blocks: Block[];
  members: Set<Entry>;
  minCpu: number;
  minMem: number;
}

const collator = new Intl.Collator();
/** Room between two neighbours' ranks when they are numbered afresh. */
const GAP = 2 ** 20;

/**
 * Agent ids as numbers in the order rank()'s tie-break (localeCompare)
 * gives them: ids that compare equal share one. A new id takes a number
 * between its neighbours'; when none is left there, all are numbered again
 * (their order unchanged) and `version` says so.
 */
export class IdOrder {
  private readonly ids: string[] = [];
  private readonly ranks: number[] = [];
  private readonly byId = new Map<string, number>();
  /** Bumped when every rank was numbered again: ranks read before are out of date (their order is not). */
  version = 0;

  rankOf(id: string): number {
    const known = this.byId.get(id);
    if (known !== undefined) return known;
    const { ids, ranks } = this;
    let lo = 0;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (collator.compare(ids[mid] as string, id) < 0) lo = mid + 1;
      else hi = mid;
    }
    let rank: number;
    if (lo < ids.length && collator.compare(ids[lo] as string, id) === 0) rank = ranks[lo] as number;
    else {
      const prev = lo > 0 ? (ranks[lo - 1] as number) : undefined;
      const next = lo < ids.length ? (ranks[lo] as number) : undefined;
      rank =
        prev === undefined
          ? next === undefined
            ? 0
            : next - GAP
          : next === undefined
            ? prev + GAP
            : (prev + next) / 2;
      if ((prev !== undefined && rank <= prev) || (next !== undefined && rank >= next)) {
        ids.splice(lo, 0, id);
        ranks.splice(lo, 0, Number.NaN);
        this.renumber();
        return this.byId.get(id) as number;
      }
    }
    ids.splice(lo, 0, id);
    ranks.splice(lo, 0, rank);
    this.byId.set(id, rank);
    return rank;
  }

  private renumber(): void {
    let n = 0;
    for (let i = 0; i < this.ids.length; i++) {
      const id = this.ids[i] as string;
      if (i > 0 && collator.compare(this.ids[i - 1] as string, id) !== 0) n++;
      this.ranks[i] = n * GAP;
      this.byId.set(id, n * GAP);
    }
    this.version++;
  }
}

/** place()'s order inside a group: fuller first, then rank()'s tie order by agent id. */
const before = (a: Entry, b: Entry) => a.used > b.used || (a.used === b.used && a.rank < b.rank);

/** Puts the entry into its group's blocks at its place in order. */
export function insertEntry(e: Entry): void {
  const blocks = e.group.blocks;
  // The first block whose last entry does not come before e.
  let lo = 0;
  let hi = blocks.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const entries = (blocks[mid] as Block).entries;
    const last = entries[entries.length - 1];
    if (last && before(last, e)) lo = mid + 1;
    else hi = mid;
  }
  let b = blocks[lo] ?? blocks[blocks.length - 1];
  if (!b) {
    b = { entries: [], front: [], maxGpu: [], stale: false };
    blocks.push(b);
  }
  let i = 0;
  let j = b.entries.length;
  while (i < j) {
    const mid = (i + j) >> 1;
    if (before(b.entries[mid] as Entry, e)) i = mid + 1;
    else j = mid;
  }
  b.entries.splice(i, 0, e);
  e.block = b;
  addToFront(b.front, e.freeCpu, e.freeMem);
  const maxGpu = b.maxGpu;
  for (let k = 0; k < e.freeGpu.length; k++) {
    const n = e.freeGpu[k] as number;
    if (k >= maxGpu.length || n > (maxGpu[k] as number)) maxGpu[k] = n;
  }
  if (b.entries.length > BLOCK_MAX) {
    const tail = b.entries.splice(BLOCK_MAX / 2);
    const nb: Block = { entries: tail, front: [], maxGpu: [], stale: false };
    for (const t of tail) t.block = nb;
    blocks.splice(blocks.indexOf(b) + 1, 0, nb);
    remax(b);
    remax(nb);
  }
}

/** Takes the entry out of its block (its front stays, over-generous, until a scan finds it promised too much). */
export function unplaceEntry(e: Entry): void {
  const b = e.block;
  if (!b) return;
  const i = b.entries.indexOf(e);
  if (i >= 0) b.entries.splice(i, 1);
  e.block = undefined;
  if (b.entries.length === 0) {
    const blocks = e.group.blocks;
    blocks.splice(blocks.indexOf(b), 1);
  } else b.stale = true;
}

/** Counts the block's front and GPU maxima again from its entries. */
export function remax(b: Block): void {
  const gpu = b.maxGpu;
  gpu.length = b.entries[0]?.freeGpu.length ?? 0;
  gpu.fill(0);
  const front = b.front;
  front.length = 0;
  for (const e of b.entries) {
    for (let k = 0; k < gpu.length; k++) if ((e.freeGpu[k] ?? 0) > (gpu[k] ?? 0)) gpu[k] = e.freeGpu[k] ?? 0;
    addToFront(front, e.freeCpu, e.freeMem);
  }
  b.stale = false;
}

/** Whether a point of the front has at least `cpu` and `mem`: the last point with enough cpu has the most memory of those. */
export function frontFits(front: number[], cpu: number, mem: number): boolean {
  let best = -1;
  for (let i = 0; i < front.length && (front[i] ?? 0) >= cpu; i += 2) best = front[i + 1] ?? 0;
  return best >= mem;
}

/** Adds (cpu, mem) to the front in place: nothing when a point already dominates it, else the points it dominates go. */
function addToFront(front: number[], cpu: number, mem: number): void {
  for (let i = 0; i < front.length; i += 2) if ((front[i] ?? 0) >= cpu && (front[i + 1] ?? 0) >= mem) return;
  let w = 0;
  for (let i = 0; i < front.length; i += 2) {
    const c = front[i] ?? 0;
    const m = front[i + 1] ?? 0;
    if (c <= cpu && m <= mem) continue;
    front[w++] = c;
    front[w++] = m;
  }
  front.length = w;
  // No point left has this cpu (it would dominate or be dominated): the new one goes before the first with less.
  let at = 0;
  while (at < front.length && (front[at] ?? 0) > cpu) at += 2;
  front.splice(at, 0, cpu, mem);
}
