// Shared GPUs in the planner, table-driven, on hosts probed from the recorded
// nvidia-smi fixtures with GPUs marked shared (berth agent --shared-gpus):
// gpu_memory requests pack onto one shared GPU by memory (best fit, across
// agents too); whole-GPU requests never take a shared GPU, nor shared
// requests an unshared one; refusals name what is missing.

import assert from "node:assert/strict";
import { before, test } from "node:test";
import { adoptedRecord } from "../../coordinator/containers/container-table.ts";
import { placementRequest, runnerRequest } from "../../coordinator/containers/runner-request.ts";
import {
  type PlacementRequest,
  Planner,
  buildClusterView,
  whyStubNeverPlaceable,
} from "../../coordinator/scheduler/index.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { sampleStatus } from "../helpers/wire-samples.ts";
import { gpuCounts } from "../../shared/fleet.ts";
import { capacity, fleetOf, stubRecord } from "../containers/fakes.ts";
import { type PlaceCase, describePlace, gpuRequest, probe, probedHosts } from "./gpu-hosts.ts";

const GiB = 1024 ** 3;
/** Hosts by name: fixture and which GPUs are shared. */
const { reports, host } = probedHosts();

const shared = (memGiB: number, gpuTypes: string[] = []): PlacementRequest => ({
  cpuMillicores: 1000,
  memoryBytes: GiB,
  gpuTypes,
  gpuCount: 1,
  gpuMemoryMiB: memGiB * 1024,
});
const whole = gpuRequest;
const cpuOnly: PlacementRequest = { cpuMillicores: 1000, memoryBytes: GiB, gpuTypes: [], gpuCount: 0 };

before(async () => {
  // 8xH100: GPUs 0 and 1 shared, 2-7 whole.
  reports["h100-shared01"] = await probe("h100x8", 8, [0, 1]);
  // The recorded H200 host, its one GPU shared.
  reports["h200-shared"] = await probe("h200-driver580", 1, "all");
  reports["h200-whole"] = await probe("h200-driver580", 1);
  // MIG-mode GPUs are never shared: "all" shares only the whole A100.
  reports["a100-mig-all"] = await probe("a100-mig", 2, "all");
});

test("an agent reports its shared GPUs apart, and never a MIG slice as shared", () => {
  assert.deepEqual(gpuCounts(reports["h100-shared01"]!), { "H100 (shared)": 2, H100: 6 });
  assert.deepEqual(gpuCounts(reports["a100-mig-all"]!), {
    "A100:3g.20gb": 1,
    "A100:2g.10gb": 1,
    "A100:1g.5gb": 2,
    "A100 (shared)": 1,
  });
});

const indexOf = (uuid: string | undefined) =>
  Object.values(reports)
    .flatMap((r) => r.devices)
    .find((d) => d.uuid === uuid)?.index;

/** want: "agent/gpuType" (and "@index" of the shared GPU), or a refusal. */
const CASES: PlaceCase[] = [
  {
    name: "a share of any shared GPU",
    fleet: ["h100-shared01"],
    req: shared(8),
    want: "h100-shared01/H100@0",
  },
  {
    name: "a share of a shared GPU of a named type, before the next type",
    fleet: ["h100-shared01", "h200-shared"],
    req: shared(8, ["H200", "H100"]),
    want: "h200-shared/H200@0",
  },
  {
    name: "whole GPUs never count the shared ones",
    fleet: ["h100-shared01"],
    req: whole(["H100"], 8),
    want: { permanent: true, reason: /no agent has 8 GPU\(s\) of type H100 \(fleet GPUs: 6xH100\)/ },
  },
  {
    name: "a whole GPU of any type never takes a shared one",
    fleet: ["h200-shared"],
    req: whole([]),
    want: { permanent: true, reason: /no agent has 1 GPU\(s\) of type any \(fleet GPUs: none\)/ },
  },
  {
    name: "a share never takes an unshared GPU; the refusal says how to share one",
    fleet: ["h200-whole"],
    req: shared(8),
    want: {
      permanent: true,
      reason:
        /no agent has a shared GPU of type any with 8 GiB of memory \(fleet shared GPUs: none; an operator shares GPUs with berth agent --shared-gpus\)/,
    },
  },
  {
    name: "more memory than any shared GPU has",
    fleet: ["h100-shared01", "h200-shared"],
    req: shared(100, ["H100"]),
    want: {
      permanent: true,
      reason:
        /no agent has a shared GPU of type H100 with 100 GiB of memory \(fleet shared GPUs: 2xH100 \(79\.6 GiB\), 1xH200 \(140\.4 GiB\)\)/,
    },
  },
  {
    name: "gpu_memory with gpu_count 2 is refused",
    fleet: ["h100-shared01"],
    req: { ...shared(8), gpuCount: 2 },
    want: {
      permanent: true,
      reason: /gpu_memory asks for part of one shared GPU: gpu_count must be 1, got 2/,
    },
  },
  {
    name: "a MIG slice cannot be shared",
    fleet: ["a100-mig-all"],
    req: shared(2, ["A100:1g.5gb"]),
    want: { permanent: true, reason: /a MIG slice \(A100:1g\.5gb\) cannot be shared/ },
  },
  {
    name: "CPU work goes to a host without GPUs before one with shared GPUs",
    fleet: ["h200-shared", "cpu-only"],
    req: cpuOnly,
    want: "cpu-only/undefined",
  },
];

describePlace(
  "place() with shared GPUs",
  CASES,
  (f) => (f === "cpu-only" ? capacity(32, 256) : host(f)),
  (got) => `${got.agentId}/${got.gpuType}${got.gpuUuid ? `@${indexOf(got.gpuUuid)}` : ""}`,
);

test("shares pack onto one shared GPU by memory, best fit, and never mix with whole GPUs", () => {
  const fleet = fleetOf([["h100-shared01", host("h100-shared01")]]);
  const planner = new Planner({ fleet });
  const reserve = (id: string, placement: PlacementRequest) =>
    planner.reserve({ id, kind: "runner", workspaceId: "ws", placement });
  const onGpu = (r: ReturnType<typeof reserve>) => (r.ok ? indexOf(r.reservation.gpuUuids?.[0]) : r.reason);

  // 81559 MiB (79.6 GiB) each: 30 GiB goes to GPU 0 (equal fits: the lowest index); 40 still fits on
  // GPU 0 (9879 MiB left) rather than on the empty GPU 1.
  assert.equal(onGpu(reserve("a", shared(30))), 0);
  assert.equal(onGpu(reserve("b", shared(40))), 0);
  // 20 fits GPU 0 no more: GPU 1; then 9 GiB fills GPU 0 (663 MiB left, the tightest fit).
  assert.equal(onGpu(reserve("c", shared(20))), 1);
  assert.equal(onGpu(reserve("d", shared(9))), 0);
  const held = planner.list().find((h) => h.id === "d")!;
  assert.equal(held.gpuMemoryMiB, 9 * 1024);
  assert.equal(held.gpuType, "H100");
  // 70 GiB: GPU 1 has 59.6 GiB left, GPU 0 663 MiB: it waits, naming what is free.
  const full = reserve("e", shared(70));
  assert.ok(!full.ok);
  assert.equal(full.permanent, false);
  assert.match(full.reason, /every agent is full for .*gpu=any shared gpu_memory=70 GiB/);
  assert.match(full.reason, /shared_gpu_memory=H100:663 MiB,H100:59\.6 GiB/);

  // The six whole H100s are taken whole; a seventh waits although shared memory is left.
  for (let i = 0; i < 6; i++) assert.ok(reserve(`w${i}`, whole(["H100"])).ok, `whole ${i}`);
  const seventh = reserve("w6", whole(["H100"]));
  assert.ok(!seventh.ok);
  assert.match(seventh.reason, /every agent is full for .*gpu=1xH100/);
  assert.ok(
    planner.list().every((h) => h.gpuMemoryMiB !== undefined || !h.gpuUuids?.some((u) => indexOf(u)! < 2)),
    "no whole-GPU reservation holds a shared GPU",
  );

  // A share leaving frees its memory: 40 GiB fits GPU 0 again.
  planner.release("b");
  assert.equal(onGpu(reserve("f", shared(40))), 0);
});

test("across agents, a share goes where it fills a shared GPU most tightly", () => {
  const fleet = fleetOf([
    ["agent-a", host("h200-shared")],
    ["agent-b", host("h200-shared")],
  ]);
  const planner = new Planner({ fleet });
  const a = planner.reserve({ id: "x", kind: "runner", workspaceId: "ws", placement: shared(100) });
  assert.ok(a.ok);
  // agent-b is emptier in every way, but agent-a's GPU has 40.4 GiB left: 30 goes there.
  const b = planner.reserve({ id: "y", kind: "runner", workspaceId: "ws", placement: shared(30) });
  assert.ok(b.ok);
  assert.equal(b.reservation.agentId, a.reservation.agentId);
  const c = planner.reserve({ id: "z", kind: "runner", workspaceId: "ws", placement: shared(30) });
  assert.ok(c.ok);
  assert.notEqual(c.reservation.agentId, a.reservation.agentId);
});

test("a container read back from an agent without its share holds the shared GPU whole", () => {
  const agents = fleetOf([["h200-shared", host("h200-shared")]]).list();
  const uuid = reports["h200-shared"]!.devices[0]!.uuid;
  const view = buildClusterView(agents, [
    { agentId: "h200-shared", cpuMillicores: 0, memoryBytes: 0, gpuCount: 1, gpuUuids: [uuid] },
  ]);
  assert.equal(view.agents[0]!.free.shared?.[0]?.freeMiB, 0);
  const known = buildClusterView(agents, [
    {
      agentId: "h200-shared",
      cpuMillicores: 0,
      memoryBytes: 0,
      gpuCount: 1,
      gpuUuids: [uuid],
      gpuMemoryMiB: 4096,
    },
  ]);
  assert.equal(known.agents[0]!.free.shared?.[0]?.freeMiB, 143771 - 4096);

  // A running container the coordinator finds on the agent (at its start) keeps its share only.
  const found = sampleStatus("ctr-1", {
    labels: { [RunnerLabels.stubId]: "stub-1", [RunnerLabels.workspaceId]: "ws-1" },
    gpus: [uuid],
    gpuMemoryMiB: 4096,
  });
  const adopted = adoptedRecord(found, view.agents[0]!, 0)!;
  assert.deepEqual(
    [adopted.reservation.gpuType, adopted.reservation.gpuUuids, adopted.reservation.gpuMemoryMiB],
    ["H200", [uuid], 4096],
  );
});

test("a stub's gpu_memory_mib reaches the placement and the agent's request", () => {
  const stub = stubRecord("stub-1", { extra: { gpu_types: ["H200"], gpu_count: 0, gpu_memory_mib: 8192 } });
  const p = placementRequest(stub, []);
  assert.deepEqual([p.gpuTypes, p.gpuCount, p.gpuMemoryMiB], [["H200"], 1, 8192]);
  const req = runnerRequest(stub, "ctr-1", "H200");
  assert.deepEqual(req.gpu, { count: 1, types: ["H200"], memoryMiB: 8192 });
  const agents = fleetOf([["h200-whole", host("h200-whole")]]).list();
  assert.match(
    whyStubNeverPlaceable(agents, stub) ?? "",
    /no agent has a shared GPU of type H200 with 8 GiB/,
  );
});
