// MIG slices in the planner, table-driven, on hosts probed from the recorded
// nvidia-smi fixtures: a slice is asked for by type and profile and placed on
// a free slice of that profile; whole-GPU requests (a type, or any GPU) never
// take a slice nor a GPU in MIG mode; the agent picks the same devices.

import assert from "node:assert/strict";
import { before, describe, it, test } from "node:test";
import { pickGpus } from "../../agent/host/allocations.ts";
import { Planner, planPlacement } from "../../coordinator/scheduler/index.ts";
import { gpuCounts } from "../../shared/fleet.ts";
import { fleetOf } from "../containers/fakes.ts";
import { type PlaceCase, describePlace, gpuRequest, probe, probedHosts } from "./gpu-hosts.ts";

const { reports, host } = probedHosts();
const req = gpuRequest;

before(async () => {
  reports["h200-mig"] = await probe("h200-mig", 2);
  reports["a100-mig"] = await probe("a100-mig", 2);
  reports["h100x8"] = await probe("h100x8", 8);
});

test("a MIG host reports its slices by type and profile, apart from its whole GPUs", () => {
  assert.deepEqual(gpuCounts(reports["h200-mig"]!), {
    "H200:3g.71gb": 1,
    "H200:2g.35gb": 1,
    "H200:1g.18gb": 2,
    H200: 1,
  });
});

/** want: "agent/gpuType", or a refusal. */
const CASES: PlaceCase[] = [
  {
    name: "a slice by profile goes to the host with that profile",
    fleet: ["h100x8", "a100-mig", "h200-mig"],
    req: req(["H200:1g.18gb"]),
    want: "h200-mig/H200:1g.18gb",
  },
  {
    name: "profiles match case-insensitively, answered in the agent's spelling",
    fleet: ["a100-mig"],
    req: req(["a100:1G.5GB"]),
    want: "a100-mig/A100:1g.5gb",
  },
  {
    name: "a whole-GPU type takes the GPU not in MIG mode",
    fleet: ["h200-mig"],
    req: req(["H200"]),
    want: "h200-mig/H200",
  },
  {
    name: "two whole H200s: the one in MIG mode does not count",
    fleet: ["h200-mig"],
    req: req(["H200"], 2),
    want: { permanent: true, reason: /no agent has 2 GPU\(s\) of type H200 \(fleet GPUs: .*1xH200\b/ },
  },
  {
    name: "any GPU is a whole GPU, never a slice",
    fleet: ["a100-mig"],
    req: req([], 2),
    want: { permanent: true, reason: /no agent has 2 GPU\(s\) of type any/ },
  },
  {
    name: "any GPU takes the whole A100 beside the MIG one",
    fleet: ["a100-mig"],
    req: req([]),
    want: "a100-mig/A100",
  },
  {
    name: "a profile the fleet lacks is refused for good, naming the fleet's slices",
    fleet: ["h200-mig", "a100-mig"],
    req: req(["H200:7g.141gb"]),
    want: { permanent: true, reason: /type H200:7g\.141gb \(fleet GPUs: .*2xH200:1g\.18gb/ },
  },
  {
    name: "a priority list of slices falls through to the next profile",
    fleet: ["a100-mig"],
    req: req(["H200:1g.18gb", "A100:3g.20gb"]),
    want: "a100-mig/A100:3g.20gb",
  },
  {
    name: "a slice, then a whole GPU: each tier as asked",
    fleet: ["h100x8"],
    req: req(["H200:1g.18gb", "H100"]),
    want: "h100x8/H100",
  },
  {
    name: "two slices in one container are refused (CUDA sees one MIG device per process)",
    fleet: ["h200-mig"],
    req: req(["H200:1g.18gb"], 2),
    want: { permanent: true, reason: /MIG slice \(H200:1g\.18gb\) is requested one per container/ },
  },
];

describePlace("place() with MIG slices", CASES, host, (got) => `${got.agentId}/${got.gpuType}`);

test("the planner fills a host's slices of one profile, then waits; others stay free", () => {
  const fleet = fleetOf([["h200-mig", host("h200-mig")]]);
  const planner = new Planner({ fleet });
  const slice = (id: string) =>
    planner.reserve({ id, kind: "runner", workspaceId: "ws", placement: req(["H200:1g.18gb"]) });
  const a = slice("ctr-a");
  const b = slice("ctr-b");
  assert.ok(a.ok && b.ok);
  assert.equal(a.reservation.gpuType, "H200:1g.18gb");
  const c = slice("ctr-c");
  assert.ok(!c.ok);
  assert.equal(c.permanent, false);
  assert.match(c.reason, /every agent is full for .*gpu=1xH200:1g\.18gb/);
  // The bigger slices and the whole GPU are still there.
  for (const [id, type] of [
    ["ctr-d", "H200:2g.35gb"],
    ["ctr-e", "H200"],
  ] as const) {
    const r = planner.reserve({ id, kind: "runner", workspaceId: "ws", placement: req([type]) });
    assert.ok(r.ok, r.ok ? "" : r.reason);
    assert.equal(r.reservation.gpuType, type);
  }
  // No whole GPU is left: any GPU waits although a 3g slice is free.
  const any = planner.reserve({ id: "ctr-f", kind: "runner", workspaceId: "ws", placement: req([]) });
  assert.ok(!any.ok);
  // The index's decision is place()'s on the whole fleet.
  planner.release("ctr-a");
  const again = planPlacement({
    agents: fleet.list(),
    held: planner.list(),
    idle: [],
    want: { workspaceId: "ws", placement: req(["H200:1g.18gb"]) },
  });
  assert.ok(again.ok);
  assert.equal(slice("ctr-g").ok, true);
});

describe("the agent picks the devices the planner chose the type of", () => {
  it("a slice request takes a free slice of that profile, lowest device first", () => {
    const report = reports["h200-mig"]!;
    const first = pickGpus(report, { count: 1, types: ["H200:1g.18gb"] }, new Set());
    assert.deepEqual(
      first.map((d) => [d.mig?.profile, d.mig?.gi]),
      [["1g.18gb", 13]],
    );
    const second = pickGpus(report, { count: 1, types: ["H200:1g.18gb"] }, new Set([first[0]!.uuid]));
    assert.equal(second[0]!.mig?.gi, 14);
    assert.throws(
      () =>
        pickGpus(report, { count: 1, types: ["H200:1g.18gb"] }, new Set([first[0]!.uuid, second[0]!.uuid])),
      /asked for 1 GPU of type H200:1g.18gb, this host has H200:1g.18gb: 2 \(0 free\)/,
    );
  });

  it("a whole-GPU request, by type or any, never takes a slice", () => {
    const report = reports["h200-mig"]!;
    assert.deepEqual(
      pickGpus(report, { count: 1, types: ["H200"] }, new Set()).map((d) => [d.index, d.mig]),
      [[1, undefined]],
    );
    assert.deepEqual(
      pickGpus(report, { count: 1 }, new Set()).map((d) => d.index),
      [1],
    );
    const whole = report.devices.find((d) => !d.mig)!.uuid;
    assert.throws(
      () => pickGpus(report, { count: 1 }, new Set([whole])),
      /this host has 1 \(0 free\); its 4 MIG slice\(s\) are given only to requests naming their profile/,
    );
  });
});
