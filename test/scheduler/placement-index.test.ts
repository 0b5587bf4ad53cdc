// The placement index (coordinator/scheduler/placement-index.ts) only narrows
// which agents place() looks at: on a randomized fleet and request stream,
// the planner's indexed path must decide exactly what planPlacement()
// decides on the whole fleet (the path before the index) — the same host,
// the same GPU type, the same refusal — while reservations come and go,
// GPUs are assigned, heartbeats change capacity and agents leave and return.

import assert from "node:assert/strict";
import { test } from "node:test";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { Planner, type PlacementRequest, planPlacement } from "../../coordinator/scheduler/index.ts";
import type { HostCapacity } from "../../shared/fleet.ts";
import { type Rng, rng } from "../helpers/seeded-fleet.ts";

const GiB = 1024 ** 3;

function hostCapacity(r: Rng, n: number): HostCapacity {
  const shape = r.pick(["cpu", "cpu", "h100", "a10g", "mixed", "odd"] as const);
  const jitter = r.next() < 0.3 ? r.int(-512, 512) * 1024 * 1024 : 0;
  const gpus = (type: string, count: number) =>
    Array.from({ length: count }, (_, i) => ({ type, uuid: `GPU-${n}-${type}-${i}` }));
  const devices =
    shape === "h100"
      ? gpus("H100", r.pick([4, 8]))
      : shape === "a10g"
        ? gpus("A10G", r.pick([1, 4]))
        : shape === "mixed"
          ? [...gpus("L4", 2), ...gpus("A10G", 1)]
          : [];
  const cores = shape === "odd" ? r.int(1, 12) : r.pick([8, 16, 32]);
  const mem = shape === "odd" ? r.int(1, 48) * GiB : r.pick([32, 64, 128]) * GiB;
  return {
    cpuCores: cores,
    memoryBytes: mem + jitter,
    disk: { path: "/", totalBytes: 1, freeBytes: 1 },
    gpus: {
      // Some hosts have GPUs the agent does not offer.
      available: devices.length > 0 && r.next() < 0.95,
      toolkit: true,
      devices: devices.map((g, index) => ({ index, model: g.type, memoryMiB: 1, ...g })),
    },
  };
}

function request(r: Rng, agents: number): PlacementRequest {
  const kind = r.next();
  const prefer =
    r.next() < 0.2 ? [`agent-${r.int(0, agents - 1)}`, `agent-${r.int(0, agents - 1)}`] : undefined;
  const base = {
    cpuMillicores: r.pick([0, 125, 250, 500, 1000, 2000, 4000, 7000, 16000]),
    memoryBytes: r.pick([0, 128, 512, 1024, 4096, 16384, 65536]) * 1024 * 1024,
    ...(prefer ? { preferAgents: prefer } : {}),
  };
  if (kind < 0.55) return { ...base, gpuTypes: [], gpuCount: 0 };
  if (kind < 0.98)
    return {
      ...base,
      gpuTypes: r.pick([[], ["H100"], ["h100", "A10G"], ["L4"], ["A10G", "L4"], ["B200"], ["B200", "a10g"]]),
      gpuCount: r.pick([1, 1, 2, 4, 8]),
    };
  return { ...base, cpuMillicores: -1, gpuTypes: [], gpuCount: 0 };
}

function heartbeat(agentId: string, capacity: HostCapacity) {
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

for (const seed of [1, 2, 3, 4, 5, 6]) {
  test(`the indexed planner decides as planPlacement on the whole fleet (seed ${seed})`, () => {
    const r = rng(seed);
    const fleet = new FleetView({ minLostAfterMs: 5000 });
    const n = r.pick([1, 7, 60, 250]);
    const caps = new Map<string, HostCapacity>();
    // Agent ids whose collation order differs from code-unit order break ties too.
    const idOf = (i: number) => (i % 5 === 0 ? `Agent-${i}` : `agent-${i}`);
    for (let i = 0; i < n; i++) {
      const cap = hostCapacity(r, i);
      caps.set(idOf(i), cap);
      fleet.observe(heartbeat(idOf(i), cap), 0);
    }
    const planner = new Planner({ fleet });
    const unsyncedAgent = idOf(r.int(0, n - 1));
    const live: string[] = [];
    let compared = 0;
    let placed = 0;
    for (let step = 0; step < 1500; step++) {
      const roll = r.next();
      if (roll < 0.25 && live.length > 0) {
        const id = live.splice(r.int(0, live.length - 1), 1)[0] as string;
        planner.release(id);
        continue;
      }
      if (roll < 0.3 && live.length > 0) {
        // The agent's answer names devices: a real one of the type, or one it does not know.
        const h = planner.get(r.pick(live));
        if (h?.gpuType && h.gpuCount > 0) {
          const devices = caps.get(h.agentId)?.gpus.devices.filter((d) => d.type === h.gpuType) ?? [];
          const uuids = devices.slice(0, h.gpuCount).map((d) => d.uuid);
          planner.assignGpus(h.id, r.next() < 0.1 ? ["GPU-unknown"] : uuids);
        }
        continue;
      }
      if (roll < 0.33) {
        const id = idOf(r.int(0, n - 1));
        const what = r.next();
        if (what < 0.3) fleet.leave(id);
        else if (what < 0.32) fleet.sweep(60_000 + step);
        else {
          const cap = what < 0.75 ? hostCapacity(r, r.int(0, n - 1)) : (caps.get(id) as HostCapacity);
          caps.set(id, cap);
          fleet.observe(heartbeat(id, cap), 60_000 + step);
        }
        continue;
      }
      if (roll < 0.35) {
        // An adopted container found on an agent at start.
        const id = `adopted-${step}`;
        planner.adopt({
          id,
          kind: "runner",
          workspaceId: "ws-a",
          agentId: idOf(r.int(0, n - 1)),
          cpuMillicores: r.int(0, 4) * 500,
          memoryBytes: r.int(0, 8) * GiB,
          gpuCount: 0,
        });
        live.push(id);
        continue;
      }
      const placement = request(r, n);
      const workspaceId = r.pick(["ws-a", "ws-b", "ws-c"]);
      const schedulable = (agentId: string) => agentId !== unsyncedAgent;
      const limits =
        r.next() < 0.3
          ? { maxContainers: r.int(1, 200), maxCpuMillicores: null, maxMemoryMb: null, maxGpus: r.int(0, 40) }
          : undefined;
      const want = { workspaceId, placement, schedulable, ...(limits ? { limits } : {}) };
      const expected = planPlacement({ agents: fleet.list(), held: planner.list(), idle: [], want });
      const id = `ctr-${step}`;
      const got = planner.reserve({ id, kind: "runner", ...want });
      compared++;
      if (expected.ok) {
        assert.ok(got.ok, `seed ${seed} step ${step}: planner refused what planPlacement placed`);
        assert.deepEqual(
          { agentId: got.reservation.agentId, gpuType: got.reservation.gpuType },
          { agentId: expected.agentId, gpuType: expected.gpuType },
          `seed ${seed} step ${step}: ${JSON.stringify(placement)}`,
        );
        live.push(id);
        placed++;
      } else {
        assert.deepEqual(got, expected, `seed ${seed} step ${step}`);
      }
    }
    assert.ok(compared > 500, `compared ${compared} decisions`);
    assert.ok(placed > 50, `placed ${placed}`);
  });
}
