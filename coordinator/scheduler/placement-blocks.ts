// The placement index's sorted blocks (placement-index.ts): each group's
// agents in place()'s order (fullest first, then agent id as localeCompare
// orders it), cut into blocks of up to BLOCK_MAX entries, and the blocks
// into runs of up to RUN_MAX blocks; blocks and runs remember the Pareto
// front of their free (CPU, memory) and their largest free GPU counts, so a
// scan skips a run of full agents with one check (a fleet of 10,000 has
// about 20 runs). Kept without new objects on the placement path: a
// reservation in or out moves one entry, and fronts and maxima are updated
// in place.

import type { LiveAgent } from "../fleet/index.ts";
import type { Reservation } from "./cluster-view.ts";

const BLOCK_MAX = 32;
const RUN_MAX = 16;

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

/** What blocks and runs of blocks remember about the entries under them. */
export interface Summary {
  /**
   * The Pareto front of free (cpu, memory), as flat pairs by cpu
   * descending (memory then ascending): there is room for a request
   * exactly when one of these points has.
   */
  front: number[];
  /** Entries left or changed since the front and maxima were computed: they may promise room no entry has. */
  stale: boolean;
  maxGpu: number[];
}

export interface Run extends Summary {
  blocks: Block[];
}

export interface Block extends Summary {
  run: Run;
  entries: Entry[];
}

export interface Group {
  types: string[];
  /** The types upper-cased (place() matches a wanted type case-insensitively), and every position. */
  upperTypes: string[];
  allSlots: number[];
  hasGpu: boolean;
  /** The entries in order: runs of blocks, none of them empty. */
  runs: Run[];
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

  /** Drops the id (its agent is gone); the others keep their numbers. */
  forget(id: string): void {
    const rank = this.byId.get(id);
    if (rank === undefined) return;
    this.byId.delete(id);
    // Ranks never decrease along ids: the first with this rank, then the id among those that share it.
    let lo = 0;
    let hi = this.ranks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((this.ranks[mid] as number) < rank) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < this.ids.length && this.ranks[i] === rank; i++)
      if (this.ids[i] === id) {
        this.ids.splice(i, 1);
        this.ranks.splice(i, 1);
        return;
      }
  }

  /** How many ids are numbered (for tests). */
  get size(): number {
    return this.ids.length;
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

/** The last entry of a block or run (none is empty). */
const lastOf = (b: Block) => b.entries[b.entries.length - 1] as Entry;
const lastOfRun = (r: Run) => lastOf(r.blocks[r.blocks.length - 1] as Block);

/** Puts the entry into its group's blocks at its place in order. */
export function insertEntry(e: Entry): void {
  const runs = e.group.runs;
  // The first run, then block, whose last entry does not come before e; else the very last.
  let lo = 0;
  let hi = runs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (before(lastOfRun(runs[mid] as Run), e)) lo = mid + 1;
    else hi = mid;
  }
  let run = runs[lo] ?? runs[runs.length - 1];
  if (!run) {
    run = { blocks: [], front: [], maxGpu: [], stale: false };
    runs.push(run);
  }
  const blocks = run.blocks;
  lo = 0;
  hi = blocks.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (before(lastOf(blocks[mid] as Block), e)) lo = mid + 1;
    else hi = mid;
  }
  let b = blocks[lo] ?? blocks[blocks.length - 1];
  if (!b) {
    b = { run, entries: [], front: [], maxGpu: [], stale: false };
    blocks.push(b);
  }
  lo = 0;
  hi = b.entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (before(b.entries[mid] as Entry, e)) lo = mid + 1;
    else hi = mid;
  }
  b.entries.splice(lo, 0, e);
  e.block = b;
  addEntry(b, e);
  addEntry(run, e);
  if (b.entries.length > BLOCK_MAX) {
    // The run's summary still covers both halves.
    const nb: Block = { run, entries: b.entries.splice(BLOCK_MAX / 2), front: [], maxGpu: [], stale: false };
    for (const t of nb.entries) t.block = nb;
    blocks.splice(blocks.indexOf(b) + 1, 0, nb);
    remax(b);
    remax(nb);
  }
  if (blocks.length > RUN_MAX) {
    const nr: Run = { blocks: blocks.splice(RUN_MAX / 2), front: [], maxGpu: [], stale: false };
    for (const t of nr.blocks) t.run = nr;
    runs.splice(runs.indexOf(run) + 1, 0, nr);
    recount(run);
    recount(nr);
  }
}

/** Takes the entry out of its block (fronts stay, over-generous, until a scan finds they promised too much). */
export function unplaceEntry(e: Entry): void {
  const b = e.block;
  if (!b) return;
  const i = b.entries.indexOf(e);
  if (i >= 0) b.entries.splice(i, 1);
  e.block = undefined;
  const run = b.run;
  run.stale = true;
  if (b.entries.length > 0) {
    b.stale = true;
    return;
  }
  run.blocks.splice(run.blocks.indexOf(b), 1);
  if (run.blocks.length === 0) {
    const runs = e.group.runs;
    runs.splice(runs.indexOf(run), 1);
  }
}

/** Adds one entry's free room to a summary that does not yet count it. */
function addEntry(s: Summary, e: Entry): void {
  addToFront(s.front, e.freeCpu, e.freeMem);
  const maxGpu = s.maxGpu;
  for (let k = 0; k < e.freeGpu.length; k++) {
    const n = e.freeGpu[k] as number;
    if (k >= maxGpu.length || n > (maxGpu[k] as number)) maxGpu[k] = n;
  }
}

/** Counts the block's front and GPU maxima again from its entries. */
export function remax(b: Block): void {
  const gpu = b.maxGpu;
  clear(gpu, b.entries[0]?.freeGpu.length ?? 0);
  const front = b.front;
  clear(front, 0);
  for (const e of b.entries) {
    for (let k = 0; k < gpu.length; k++) if ((e.freeGpu[k] ?? 0) > (gpu[k] ?? 0)) gpu[k] = e.freeGpu[k] ?? 0;
    addToFront(front, e.freeCpu, e.freeMem);
  }
  b.stale = false;
}

/** Counts the run's front and GPU maxima again from its blocks' (stale ones counted again first, so it is exact). */
export function recount(run: Run): void {
  const gpu = run.maxGpu;
  clear(gpu, run.blocks[0]?.maxGpu.length ?? 0);
  const front = run.front;
  clear(front, 0);
  for (const b of run.blocks) {
    if (b.stale) remax(b);
    for (let k = 0; k < gpu.length; k++) if ((b.maxGpu[k] ?? 0) > (gpu[k] ?? 0)) gpu[k] = b.maxGpu[k] ?? 0;
    for (let i = 0; i < b.front.length; i += 2) addToFront(front, b.front[i] ?? 0, b.front[i + 1] ?? 0);
  }
  run.stale = false;
}

/** Makes `xs` n zeros, by pop and push (cheaper than setting length on these small arrays). */
function clear(xs: number[], n: number): void {
  while (xs.length > n) xs.pop();
  for (let k = 0; k < xs.length; k++) xs[k] = 0;
  while (xs.length < n) xs.push(0);
}

/** Whether a point of the front has at least `cpu` and `mem`: the last point with enough cpu has the most memory of those. */
export function frontFits(front: number[], cpu: number, mem: number): boolean {
  let best = -1;
  for (let i = 0; i < front.length && (front[i] ?? 0) >= cpu; i += 2) best = front[i + 1] ?? 0;
  return best >= mem;
}

/**
 * Adds (cpu, mem) to the front in place: nothing when a point already
 * dominates it, else it takes the place of the points it dominates. Those
 * are adjacent (the points with no more cpu are a suffix, their memory
 * ascending), so the change is one overwrite and a shift, no new array.
 */
function addToFront(front: number[], cpu: number, mem: number): void {
  const n = front.length;
  let from = n;
  for (let i = 0; i < n; i += 2) {
    const c = front[i] as number;
    if (c >= cpu && (front[i + 1] as number) >= mem) return;
    if (c <= cpu && from === n) from = i;
  }
  // Points from `from` on have no more cpu; those up to `to` have no more memory either: dominated.
  let to = from;
  while (to < n && (front[to + 1] as number) <= mem) to += 2;
  if (to === from) {
    front.push(0, 0);
    for (let i = n + 1; i >= from + 2; i--) front[i] = front[i - 2] as number;
  } else if (to > from + 2) {
    const gone = to - from - 2;
    for (let i = from + 2; i < n - gone; i++) front[i] = front[i + gone] as number;
    for (let k = 0; k < gone; k++) front.pop();
  }
  front[from] = cpu;
  front[from + 1] = mem;
}
