// Pools (docs/pools.md): a request that names one is placed only on that
// pool's agents (heartbeat `pool`, default "default"); a pool no ready agent
// is in is refused at once as permanent, naming it and the pools there are.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import {
  Planner,
  type PlacementRequest,
  buildClusterView,
  place,
} from "../../coordinator/scheduler/index.ts";
import { whyNeverPlaceable } from "../../coordinator/scheduler/feasible.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";

function fleet(agents: [id: string, pool: string | undefined, cores: number][]): FleetView {
  return fleetOf(agents.map(([id, pool, cores]) => [id, capacity(cores, 64), pool ? { pool } : {}]));
}

const want = (cores: number, pool?: string): PlacementRequest => ({
  cpuMillicores: cores * 1000,
  memoryBytes: 1024 ** 2,
  gpuTypes: [],
  gpuCount: 0,
  ...(pool ? { pool } : {}),
});

test("a pool's requests go only to its agents; without a pool any agent takes them", () => {
  // The big agent would win bin packing for a small request; the pool decides instead.
  const f = fleet([
    ["big", undefined, 16],
    ["gpu-1", "gpu", 2],
  ]);
  const view = buildClusterView(f.list(), []);
  assert.deepEqual(
    view.agents.map((a) => [a.agentId, a.pool]),
    [
      ["big", "default"],
      ["gpu-1", "gpu"],
    ],
    "an agent without a pool in its heartbeat is in the default pool",
  );
  assert.deepEqual(place(view, want(1, "gpu")), { ok: true, agentId: "gpu-1" });
  assert.deepEqual(place(view, want(1, "default")), { ok: true, agentId: "big" });
  const full = place(view, want(4, "gpu"));
  assert.equal(full.ok, false);
  assert.equal(!full.ok && full.permanent, true, "the pool's agents can never hold 4 cores");
});

test("an unknown pool is refused at once as permanent, naming it and the fleet's pools", () => {
  const f = fleet([
    ["a", undefined, 4],
    ["b", "cpu-large", 4],
  ]);
  const p = place(buildClusterView(f.list(), []), want(1, "h100"));
  assert.deepEqual(p, {
    ok: false,
    permanent: true,
    reason: 'no agent is in pool "h100" (the fleet has pools: cpu-large, default)',
  });
  assert.match(whyNeverPlaceable(f.list(), want(1, "h100")) ?? "", /pool "h100"/);
  assert.equal(whyNeverPlaceable(f.list(), want(1, "cpu-large")), undefined);
});

test("the planner (its indexed fast path included) keeps to the pool and refuses an unknown one as unplaceable", async () => {
  const f = fleet([
    ["big", undefined, 16],
    ["small", "edge", 2],
  ]);
  const planner = new Planner({ fleet: f });
  const r = planner.reserve({ id: "ctr-1", kind: "pod", workspaceId: "ws", placement: want(1, "edge") });
  assert.ok(r.ok);
  assert.equal(r.reservation.agentId, "small");
  const plain = planner.reserve({ id: "ctr-2", kind: "pod", workspaceId: "ws", placement: want(8) });
  assert.ok(plain.ok);
  assert.equal(plain.reservation.agentId, "big");
  await assert.rejects(
    planner.reserveWithin(
      { id: "ctr-3", kind: "pod", workspaceId: "ws", placement: want(1, "nope") },
      { waitMs: 60_000, what: "the pod" },
    ),
    (e: unknown) => {
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "unplaceable");
      assert.match(
        e.message,
        /^cannot place the pod: no agent is in pool "nope" \(the fleet has pools: default, edge\)$/,
      );
      return true;
    },
  );
  assert.deepEqual(
    planner
      .list()
      .map((x) => x.id)
      .sort(),
    ["ctr-1", "ctr-2"],
    "nothing held for the refused one",
  );
});
