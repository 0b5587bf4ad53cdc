// Pull ahead (docs/images.md, "Pull ahead"): an active deployment's image is
// pulled by the agents place() would pick for its first containers, each
// once, before any container starts; not for the default image, a stopped
// deployment or a function's stub, and never on a host that cannot hold it.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { PullAhead } from "../../coordinator/containers/pull-ahead.ts";
import type { StubRecord } from "../../coordinator/containers/types.ts";
import { buildClusterView, type Held, likelyAgents } from "../../coordinator/scheduler/index.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { capacity, fleetOf, stubRecord } from "./fakes.ts";

const IMAGE = "registry.test/berth/ws-1/app:abc";
const silent = { info() {}, warn() {} };

describe("pull ahead", () => {
  test("likelyAgents: distinct agents in place()'s order, up to n, only those that fit", () => {
    const fleet = fleetOf([
      ["small", capacity(1, 8)],
      ["big-a", capacity(8, 64)],
      ["big-b", capacity(8, 64)],
    ]);
    const view = buildClusterView(fleet.ready(), []);
    const req = { cpuMillicores: 4000, memoryBytes: 1024 ** 3, gpuCount: 0, gpuTypes: [] };
    assert.deepEqual(likelyAgents(view, req, 2), ["big-a", "big-b"]);
    assert.deepEqual(likelyAgents(view, req, 5), ["big-a", "big-b"], "the 1-core host never fits 4 cores");
    assert.deepEqual(likelyAgents(view, req, 0), []);
    // A reservation that fills big-a leaves big-b alone.
    const full: Held = {
      id: "c1",
      kind: "runner",
      workspaceId: "ws-2",
      agentId: "big-a",
      cpuMillicores: 8000,
      memoryBytes: 1024 ** 3,
      gpuCount: 0,
    };
    assert.deepEqual(likelyAgents(buildClusterView(fleet.ready(), [full]), req, 2), ["big-b"]);
  });

  function setup(o: { active?: boolean; extra?: Partial<StubRecord["extra"]> } = {}) {
    const fleet = fleetOf([
      ["a", capacity(4, 16)],
      ["b", capacity(4, 16)],
      ["c", capacity(4, 16)],
    ]);
    const agents = new Map(["a", "b", "c"].map((id) => [id, new FakeContainerApi({ agentId: id })]));
    for (const a of agents.values())
      a.images = [{ ...a.images[0], refs: [IMAGE] } as (typeof a.images)[number]];
    const stub = stubRecord("stub-1", { extra: { image_ref: IMAGE, ...o.extra } });
    const pulls = new PullAhead({
      fleet,
      reservations: () => [],
      stubs: { get: async (id) => (id === stub.id ? stub : undefined) },
      deployments: {
        of: (id) => (id === stub.id ? { active: o.active ?? true, minContainers: 0 } : undefined),
        baselines: () => [],
      },
      agents: { client: (id) => agents.get(id) as FakeContainerApi },
      log: silent,
    });
    const pulled = () =>
      [...agents.values()].flatMap((a) => a.calls.filter((c) => c[0] === "pullImage").map(() => a.agentId));
    return { pulls, pulled, stub };
  }

  test("a deployed stub's image is pulled by the two hosts place() would pick, and only by them", async () => {
    const { pulls, pulled } = setup();
    const chosen = await pulls.stubChanged("stub-1");
    assert.equal(chosen.length, 2);
    await pulls.settled();
    assert.deepEqual(pulled().sort(), [...chosen].sort());
    // The same deployment changed again: the same hosts (an image already there is a quick no-op pull).
    assert.deepEqual(await pulls.stubChanged("stub-1"), chosen);
    await pulls.settled();
    assert.deepEqual(new Set(pulled()), new Set(chosen));
  });

  test("nothing is pulled for the default image, a stopped deployment or a stub of no deployment", async () => {
    const none = setup({ extra: { image_ref: "" } });
    assert.deepEqual(await none.pulls.stubChanged("stub-1"), []);
    const stopped = setup({ active: false });
    assert.deepEqual(await stopped.pulls.stubChanged("stub-1"), []);
    const fn = setup();
    assert.deepEqual(await fn.pulls.stubChanged("stub-of-a-function"), []);
    for (const s of [none, stopped, fn]) {
      await s.pulls.settled();
      assert.deepEqual(s.pulled(), []);
    }
  });

  test("a failed pull is only logged", async () => {
    const { pulls, pulled } = setup({ extra: { image_ref: "registry.test/missing:1" } });
    const chosen = await pulls.stubChanged("stub-1");
    await pulls.settled();
    assert.equal(chosen.length, 2, "the fake agents refuse the unknown image, and nothing throws");
    assert.equal(pulled().length, 2);
  });
});
