// The placement index's building blocks (coordinator/scheduler/placement-blocks.ts):
// agent ids as numbers in localeCompare's order, also after the room
// between two neighbours runs out, and the Pareto fronts of blocks and runs
// of blocks, which must never miss room an entry has, and say "room"
// exactly when some entry has it once recounted.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type Entry,
  type Group,
  IdOrder,
  type Summary,
  frontFits,
  insertEntry,
  recount,
  remax,
  unplaceEntry,
} from "../../coordinator/scheduler/placement-blocks.ts";
import { mulberry32 as rng } from "../helpers/seeded-fleet.ts";

const sign = (n: number) => (n < 0 ? -1 : n > 0 ? 1 : 0);

test("IdOrder numbers ids in localeCompare's order, also when it must number them afresh", () => {
  const order = new IdOrder();
  const ids: string[] = [];
  // Each new id lands just below "b" (numbered below "c"): the midpoints run out of precision and force renumbering.
  for (let i = 0; i < 200; i++) ids.push(`a${String(i).padStart(3, "0")}`);
  ids.unshift("c", "b");
  // Ids whose collation differs from code-unit order, and ids localeCompare calls equal to others.
  const r = rng(3);
  for (let i = 0; i < 300; i++) {
    const n = Math.floor(r() * 1000);
    ids.push(r() < 0.5 ? `Agent-${n}` : `agent_${n}`, `node${n}.example`, `é${n}`, `e\u0301${n}`);
  }
  const versions = new Set<number>();
  for (const id of ids) {
    order.rankOf(id);
    versions.add(order.version);
  }
  assert.ok(versions.size > 1, "renumbered at least once");
  // Agents that go away are forgotten (and numbered again when they come back); the rest keep their order.
  const gone = new Set(ids.filter(() => r() < 0.3));
  for (const id of gone) order.forget(id);
  assert.equal(order.size, new Set(ids).size - gone.size);
  for (const id of gone) if (r() < 0.5) gone.delete(id);
  const unique = [...new Set(ids)].filter((id) => !gone.has(id));
  for (let i = 0; i < 4000; i++) {
    const a = unique[Math.floor(r() * unique.length)] as string;
    const b = unique[Math.floor(r() * unique.length)] as string;
    assert.equal(sign(order.rankOf(a) - order.rankOf(b)), sign(a.localeCompare(b)), `${a} vs ${b}`);
  }
});

function entry(group: Group, id: number, freeCpu: number, freeMem: number, used: number): Entry {
  return {
    agent: undefined as never,
    id: `agent-${id}`,
    rank: id,
    group,
    totalCpu: 1000,
    totalMem: 1000,
    uuids: [],
    held: new Map(),
    freeCpu,
    freeMem,
    freeGpu: [Math.floor(freeCpu / 250)],
    used,
  };
}

test("block fronts and GPU maxima say there is room exactly when an entry has it", () => {
  const r = rng(7);
  const group: Group = {
    types: ["T"],
    upperTypes: ["T"],
    allSlots: [0],
    hasGpu: true,
    runs: [],
    members: new Set(),
    minCpu: 1000,
    minMem: 1000,
  };
  const live: Entry[] = [];
  for (let step = 0; step < 6000; step++) {
    if (live.length > 0 && r() < 0.4) {
      const e = live.splice(Math.floor(r() * live.length), 1)[0] as Entry;
      unplaceEntry(e);
    } else {
      const e = entry(
        group,
        step,
        Math.floor(r() * 9) * 125,
        Math.floor(r() * 9) * 125,
        Math.floor(r() * 20) / 20,
      );
      insertEntry(e);
      live.push(e);
    }
    if (step % 10 !== 0) continue;
    // Sorted fullest first, then by rank, across blocks and runs.
    const blocks = group.runs.flatMap((run) => run.blocks);
    const flat = blocks.flatMap((b) => b.entries);
    assert.equal(flat.length, live.length);
    for (let i = 1; i < flat.length; i++) {
      const [a, b] = [flat[i - 1] as Entry, flat[i] as Entry];
      assert.ok(a.used > b.used || (a.used === b.used && a.rank < b.rank), `order at ${i}`);
    }
    for (const b of blocks) {
      assert.ok(b.entries.length > 0 && group.runs.includes(b.run) && b.run.blocks.includes(b));
      for (const e of b.entries) assert.equal(e.block, b);
    }
    // Blocks and runs alike: recounted now and then, as scans do.
    const summaries: [Summary, Entry[], () => void][] = [
      ...blocks.map((b): [Summary, Entry[], () => void] => [b, b.entries, () => remax(b)]),
      ...group.runs.map((run): [Summary, Entry[], () => void] => [
        run,
        run.blocks.flatMap((b) => b.entries),
        () => recount(run),
      ]),
    ];
    for (const [s, entries, recountIt] of summaries) {
      if (s.stale && r() < 0.5) recountIt();
      const cpu = Math.floor(r() * 9) * 125;
      const mem = Math.floor(r() * 9) * 125;
      const has = entries.some((e) => e.freeCpu >= cpu && e.freeMem >= mem);
      // A stale front may promise room that left; a fresh one is exact. Neither may miss room.
      if (has) assert.ok(frontFits(s.front, cpu, mem), "the front misses room an entry has");
      if (!s.stale) {
        assert.equal(frontFits(s.front, cpu, mem), has, `fresh front for ${cpu}/${mem}`);
        assert.equal(s.maxGpu[0], Math.max(...entries.map((e) => e.freeGpu[0] as number)));
      }
    }
  }
  assert.ok(group.runs.length > 2, `${group.runs.length} runs`);
});
