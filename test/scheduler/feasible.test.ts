import assert from "node:assert/strict";
import { test } from "node:test";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { whyStubNeverPlaceable } from "../../coordinator/scheduler/feasible.ts";
import { capacity, oneAgentFleet, stubRecord } from "../containers/fakes.ts";

const a10gHost = () => oneAgentFleet("agent-a", capacity(8, 32, [{ type: "A10G", uuid: "GPU-1" }]));

test("a GPU type the fleet lacks: the reason names the type and what the fleet has", () => {
  const stub = stubRecord("s", { extra: { gpu_types: ["H200"], gpu_count: 1 } });
  const why = whyStubNeverPlaceable(a10gHost().list(), stub);
  assert.match(why ?? "", /no agent has 1 GPU\(s\) of type H200 \(fleet GPUs: 1xA10G\)/);
});

test("more memory or cpu than the largest agent is named; what fits, even when busy, is no warning", () => {
  const fleet = a10gHost();
  const big = stubRecord("big", {
    config: { runtime: { cpu: 64, gpu: "", memory: 128 * 1024, image_id: "" } },
    extra: { cpu_millicores: 64_000 },
  });
  const why = whyStubNeverPlaceable(fleet.list(), big) ?? "";
  assert.match(why, /largest agent has cpu=8/);
  assert.match(why, /largest agent has memory=32/);
  assert.equal(
    whyStubNeverPlaceable(fleet.list(), stubRecord("ok", { extra: { gpu_types: ["A10G"] } })),
    undefined,
  );
  assert.equal(
    whyStubNeverPlaceable(fleet.list(), stubRecord("cpu", { extra: { cpu_millicores: 100 } })),
    undefined,
  );
});

test("with no agent ready nothing is known about the fleet: no warning", () => {
  const stub = stubRecord("s", { extra: { gpu_types: ["H200"] } });
  assert.equal(whyStubNeverPlaceable(new FleetView().list(), stub), undefined);
});
