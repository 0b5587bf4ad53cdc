// The planner's fast placement path (the placement index choosing the agent
// itself, without building views or calling place()) must make exactly the
// decisions of the simple reference: planPlacement() over the whole fleet,
// i.e. place() on a view of every agent and every reservation. Checked on
// fleets shaped like bench/scheduler's (many identical hosts, so ties and
// ordering matter) with mixed CPU/GPU requests, workspace limits, preferred
// agents, schedulable filters, GPU assignments, heartbeats and agents
// leaving, in steady state (every placement follows a release). A second
// test replays a recorded stream and compares its decisions, as one digest,
// with those the planner made before the fast path existed.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { type PlacementRequest, Planner, planPlacement } from "../../coordinator/scheduler/index.ts";
import type { ContainerLimits } from "../../coordinator/scheduler/quota.ts";
import type { Heartbeat, HostCapacity } from "../../shared/fleet.ts";
import { benchHostCapacity, type Rng, rng } from "../helpers/seeded-fleet.ts";

const MiB = 1024 ** 2;

/** bench/scheduler's fleet; `odd` adds a few hosts of other shapes. */
const capacityOf = (i: number, odd: boolean): HostCapacity =>
  benchHostCapacity(i, { odd, gpuMemoryMiB: 1, disk: { path: "/", totalBytes: 1, freeBytes: 1 } });

function heartbeat(agentId: string, capacity: HostCapacity): Heartbeat {
  return {
    agentId,
    hostname: agentId,
    version: "t",
    sentAt: 0,
    intervalMs: 1000,
    grpcAddress: "127.0.0.1:1",
    capacity,
  };
}

interface Want {
  workspaceId: string;
  stubId: string;
  placement: PlacementRequest;
  limits?: ContainerLimits;
}

/** bench/scheduler's request mix: 94% CPU-only, 4% H100 x1-8, 2% "A10G or L4" or any GPU. */
function request(r: Rng, agentIds: readonly string[], odd: boolean): Want {
  const k = r.next();
  const gpu =
    k < 0.94
      ? { gpuTypes: [], gpuCount: 0 }
      : k < 0.98
        ? { gpuTypes: ["H100"], gpuCount: r.pick([1, 1, 2, 4, 8]) }
        : { gpuTypes: r.pick([["A10G", "L4"], [], ["l4"]]), gpuCount: r.pick([1, 1, 2]) };
  const placement: PlacementRequest = {
    cpuMillicores: r.pick(odd ? [0, 250, 500, 1000, 2000, 4000, 1500.5] : [250, 500, 1000, 2000, 4000]),
    memoryBytes: r.pick([512, 1024, 2048, 4096, 16384]) * MiB,
    ...gpu,
  };
  if (r.next() < 0.2) placement.preferAgents = [r.pick(agentIds), r.pick(agentIds)];
  const limits =
    r.next() < 0.33
      ? { maxContainers: odd ? 40 : 5000, maxCpuMillicores: null, maxMemoryMb: null, maxGpus: odd ? 6 : 2000 }
      : undefined;
  return {
    workspaceId: `ws-${Math.floor(r.next() * (odd ? 20 : 500))}`,
    stubId: `stub-${Math.floor(r.next() * 5000)}`,
    placement,
    ...(limits ? { limits } : {}),
  };
}

function fleetOf(n: number, odd: boolean) {
  const fleet = new FleetView();
  // Ids whose collation order differs from code-unit order (upper case, digits of different lengths).
  const ids = Array.from({ length: n }, (_, i) =>
    odd && i % 7 === 3 ? `Agent-${i}` : `agent-${i.toString(36).padStart(3, "0")}`,
  );
  const joins = [...ids.keys()];
  if (odd) {
    // The two last ids (in localeCompare's order) join first, then the rest in order: each new one lands just
    // below the same neighbour, so the index's id numbers run out of room and are numbered afresh (IdOrder).
    joins.sort((x, y) => (ids[x] as string).localeCompare(ids[y] as string));
    joins.unshift(...joins.splice(-2).reverse());
  }
  for (const i of joins) fleet.observe(heartbeat(ids[i] as string, capacityOf(i, odd)), 0);
  return { fleet, ids };
}

for (const [seed, agents, odd, steady] of [
  [1, 300, false, 2500],
  [2, 300, true, 2500],
  [3, 40, true, 2500],
  [4, 1000, false, 600],
] as const) {
  test(`the fast path plans as place() over the whole fleet: ${agents} agents, seed ${seed}${odd ? ", odd hosts and limits" : ""}`, () => {
    const r = rng(seed);
    const { fleet, ids } = fleetOf(agents, odd);
    const planner = new Planner({ fleet });
    const live: string[] = [];
    const target = agents * 10;
    const unsynced = odd ? ids[1] : undefined;
    let compared = 0;
    let placed = 0;
    let gpuPlaced = 0;
    for (let step = 0; step < target + steady; step++) {
      // Steady state after the fill: a release (the oldest, or a random one) before every placement.
      if (step >= target && live.length > 0) {
        const at = r.next() < 0.7 ? 0 : Math.floor(r.next() * live.length);
        planner.release(live.splice(at, 1)[0] as string);
      }
      const roll = r.next();
      if (roll < 0.02) {
        const i = Math.floor(r.next() * agents);
        if (odd && r.next() < 0.2) fleet.leave(ids[i] as string);
        else fleet.observe(heartbeat(ids[i] as string, capacityOf(i, odd)), step);
      }
      if (roll > 0.97 && live.length > 0) {
        const h = planner.get(r.pick(live));
        if (h?.gpuType && h.gpuCount > 0) {
          const devices = capacityOf(ids.indexOf(h.agentId), odd).gpus.devices.filter(
            (d) => d.type === h.gpuType,
          );
          planner.assignGpus(
            h.id,
            devices
              .slice(r.next() < 0.5 ? 0 : 1)
              .slice(0, h.gpuCount)
              .map((d) => d.uuid),
          );
        }
      }
      const want = {
        ...request(r, ids, odd),
        ...(unsynced ? { schedulable: (id: string) => id !== unsynced } : {}),
      };
      // The whole-fleet reference is slow on big fleets: compared on every step once full, and on a sample while filling.
      const check = step >= target || step % 25 === 0;
      const expected = check
        ? planPlacement({ agents: fleet.list(), held: planner.list(), idle: [], want })
        : undefined;
      const id = `ctr-${step}`;
      const got = planner.reserve({ id, kind: "runner", ...want });
      if (got.ok) {
        live.push(id);
        placed++;
        if (want.placement.gpuCount > 0) gpuPlaced++;
      }
      if (!expected) continue;
      compared++;
      if (expected.ok) {
        assert.ok(got.ok, `seed ${seed} step ${step}: refused what the reference placed`);
        assert.deepEqual(
          { agentId: got.reservation.agentId, gpuType: got.reservation.gpuType },
          { agentId: expected.agentId, gpuType: expected.gpuType },
          `seed ${seed} step ${step}: ${JSON.stringify(want.placement)}`,
        );
      } else {
        assert.deepEqual(got, expected, `seed ${seed} step ${step}`);
      }
    }
    assert.ok(compared >= steady, `compared ${compared}`);
    assert.ok(placed > target / 2 && gpuPlaced > 50, `placed ${placed}, ${gpuPlaced} with GPUs`);
  });
}

/**
 * Decisions on bench/scheduler's stream (1,000 agents filled to 10
 * containers each, then 20,000 placements each after releasing the oldest),
 * recorded with the planner as it was before the fast path (coordinator/scheduler at bbd4cb9):
 * every agent id and GPU type chosen, and every refusal, hashed in order.
 */
const RECORDED = {
  agents: 1000,
  placements: 20_000,
  placed: 19_869,
  refused: 131,
  digest: "aa7e83018ac57d5acd35ffe8c538dc0bcb9832b6aa619a120d3c8cb0b84d12e8",
};

test("on a recorded stream the planner makes the decisions it made before the fast path", () => {
  const r = rng(7);
  const { fleet, ids } = fleetOf(RECORDED.agents, false);
  const planner = new Planner({ fleet });
  const live: string[] = [];
  const hash = createHash("sha256");
  const target = RECORDED.agents * 10;
  let seq = 0;
  const reserve = () => {
    const id = `ctr-${seq++}`;
    const got = planner.reserve({ id, kind: "runner", ...request(r, ids, false) });
    if (got.ok) live.push(id);
    return got;
  };
  while (live.length < target) reserve();
  let placed = 0;
  let refused = 0;
  for (let i = 0; i < RECORDED.placements; i++) {
    planner.release(live.shift() as string);
    if (i % 25 === 0)
      fleet.observe(heartbeat(ids[i % ids.length] as string, capacityOf(i % ids.length, false)), i);
    const got = reserve();
    if (got.ok) placed++;
    else refused++;
    hash.update(got.ok ? `${got.reservation.agentId}/${got.reservation.gpuType ?? ""};` : `!${got.reason};`);
  }
  const digest = hash.digest("hex");
  assert.deepEqual(
    { placed, refused, digest },
    { placed: RECORDED.placed, refused: RECORDED.refused, digest: RECORDED.digest },
  );
});
