// GPU hosts for the planner's table-driven tests (mig.test.ts,
// shared-gpus.test.ts): what the agent's probe reports for a recorded
// nvidia-smi fixture, hosts carrying those reports, and place() run over a
// table of cases.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import type { SharedGpuSelection } from "../../agent/capacity/mps.ts";
import {
  type Placement,
  type PlacementRequest,
  buildClusterView,
  place,
} from "../../coordinator/scheduler/index.ts";
import type { GpuReport, HostCapacity } from "../../shared/fleet.ts";
import { fakeBin, fakeEnv, listingDevDir } from "../capacity/fake-nvidia.ts";
import { GiB, capacity, fleetOf } from "../containers/fakes.ts";

/** What the agent's probe reports for a recorded host, sharing sharedGpus if given. */
export async function probe(
  fixture: string,
  gpus: number,
  sharedGpus?: SharedGpuSelection,
): Promise<GpuReport> {
  const hooks: (() => void)[] = [];
  const t = { after: (fn: () => void) => hooks.push(fn) };
  try {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const names = ["nvidiactl", "nvidia-uvm", ...Array.from({ length: gpus }, (_, i) => `nvidia${i}`)];
    const r = await new NvidiaGpuProbe({
      env: fakeEnv(bin, fixture),
      devDir: listingDevDir(t, names),
      ...(sharedGpus ? { sharedGpus } : {}),
    }).probe();
    assert.equal(r.available, true, r.reason);
    return r;
  } finally {
    for (const h of hooks) h();
  }
}

/** Probe reports by name (a test file fills them in before()), and a 32-core host carrying one. */
export function probedHosts() {
  const reports: Record<string, GpuReport> = {};
  const host = (name: string): HostCapacity => ({ ...capacity(32, 256), gpus: reports[name]! });
  return { reports, host };
}

/** gpuCount whole GPUs of one of gpuTypes (none: any GPU), with one core and 1 GiB. */
export const gpuRequest = (gpuTypes: string[], gpuCount = 1): PlacementRequest => ({
  cpuMillicores: 1000,
  memoryBytes: GiB,
  gpuTypes,
  gpuCount,
});

export interface PlaceCase {
  name: string;
  fleet: string[];
  req: PlacementRequest;
  /** Where it is placed, as the file's `where` writes it, or a refusal: permanent or not, and its reason. */
  want: string | { permanent: boolean; reason: RegExp };
}

/** One test a case: place() on a fleet of the case's hosts gives what the case wants. */
export function describePlace(
  title: string,
  cases: PlaceCase[],
  hostOf: (name: string) => HostCapacity,
  where: (got: Extract<Placement, { ok: true }>) => string,
): void {
  describe(title, () => {
    for (const c of cases) {
      it(c.name, () => {
        const agents = fleetOf(c.fleet.map((f) => [f, hostOf(f)] as [string, HostCapacity])).list();
        const got = place(buildClusterView(agents, []), c.req);
        if (typeof c.want === "string") {
          assert.ok(got.ok, got.ok ? "" : got.reason);
          assert.equal(where(got), c.want);
        } else {
          assert.ok(!got.ok, "placed");
          assert.equal(got.permanent, c.want.permanent, got.reason);
          assert.match(got.reason, c.want.reason);
        }
      });
    }
  });
}
