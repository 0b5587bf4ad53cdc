// The pure scheduler: cluster views built from heartbeats and reservations,
// and placement decisions, table-driven.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { LiveAgent } from "../../coordinator/fleet/fleet-view.ts";
import {
  type AgentView,
  type ClusterView,
  type PlacementRequest,
  type Reservation,
  buildClusterView,
  place,
} from "../../coordinator/scheduler/index.ts";
import type { GpuDevice, HostCapacity } from "../../shared/fleet.ts";

const GiB = 1024 ** 3;

function agent(
  agentId: string,
  cpu: number,
  memGiB: number,
  gpus: Record<string, number> = {},
  opts: { ready?: boolean; usedCpu?: number; usedMemGiB?: number; usedGpus?: Record<string, number> } = {},
): AgentView {
  const total = {
    cpuMillicores: cpu * 1000,
    memoryBytes: memGiB * GiB,
    gpus: {} as Record<string, string[]>,
  };
  const free = {
    cpuMillicores: total.cpuMillicores,
    memoryBytes: total.memoryBytes,
    gpus: {} as Record<string, string[]>,
  };
  for (const [type, n] of Object.entries(gpus)) {
    const uuids = Array.from({ length: n }, (_, i) => `${agentId}-${type}-${i}`);
    total.gpus[type] = uuids;
    free.gpus[type] = uuids.slice(opts.usedGpus?.[type] ?? 0);
  }
  free.cpuMillicores -= (opts.usedCpu ?? 0) * 1000;
  free.memoryBytes -= (opts.usedMemGiB ?? 0) * GiB;
  return { agentId, ready: opts.ready ?? true, total, free };
}

const req = (p: Partial<PlacementRequest> & { cpu?: number; memGiB?: number }): PlacementRequest => ({
  cpuMillicores: (p.cpu ?? 1) * 1000,
  memoryBytes: (p.memGiB ?? 1) * GiB,
  gpuTypes: p.gpuTypes ?? [],
  gpuCount: p.gpuCount ?? 0,
  ...(p.preferAgents ? { preferAgents: p.preferAgents } : {}),
});

interface Case {
  name: string;
  agents: AgentView[];
  req: PlacementRequest;
  /** agentId[/gpuType], or "permanent: /re/" / "temporary: /re/". */
  want: string | { permanent: boolean; reason: RegExp };
}

const cases: Case[] = [
  { name: "one agent that fits", agents: [agent("a", 4, 8)], req: req({}), want: "a" },
  {
    name: "cpu filter skips the small agent",
    agents: [agent("small", 1, 64), agent("big", 8, 8)],
    req: req({ cpu: 2 }),
    want: "big",
  },
  {
    name: "memory filter skips the small agent",
    agents: [agent("small", 16, 1), agent("big", 2, 32)],
    req: req({ memGiB: 4 }),
    want: "big",
  },
  {
    name: "agents that are not ready are never chosen",
    agents: [agent("z-ready", 2, 4), agent("a-busy", 64, 256, {}, { ready: false })],
    req: req({}),
    want: "z-ready",
  },
  {
    name: "bin-pack: the fuller agent wins so the empty one stays whole",
    agents: [agent("empty", 8, 32), agent("half", 8, 32, {}, { usedCpu: 4, usedMemGiB: 16 })],
    req: req({ cpu: 2, memGiB: 4 }),
    want: "half",
  },
  {
    name: "bin-pack: a big request still finds the empty agent",
    agents: [agent("empty", 8, 32), agent("half", 8, 32, {}, { usedCpu: 4, usedMemGiB: 16 })],
    req: req({ cpu: 6, memGiB: 20 }),
    want: "empty",
  },
  {
    name: "preferred agents (holding the code) beat bin-packing",
    agents: [agent("empty", 8, 32), agent("half", 8, 32, {}, { usedCpu: 4, usedMemGiB: 16 })],
    req: req({ preferAgents: ["empty"] }),
    want: "empty",
  },
  {
    name: "CPU-only work avoids GPU hosts",
    agents: [agent("gpu", 8, 32, { H100: 8 }, { usedCpu: 6 }), agent("cpu", 8, 32)],
    req: req({}),
    want: "cpu",
  },
  {
    name: "CPU-only work uses a GPU host when it is the only one with room",
    agents: [agent("gpu", 8, 32, { H100: 8 }), agent("cpu", 8, 32, {}, { usedCpu: 8 })],
    req: req({}),
    want: "gpu",
  },
  {
    name: "GPU priority: the first type anywhere beats the second type on a preferred agent",
    agents: [agent("a100s", 16, 64, { A100: 4 }), agent("h100s", 16, 64, { H100: 4 }, { usedCpu: 15 })],
    req: req({ gpuTypes: ["H100", "A100"], gpuCount: 1, preferAgents: ["a100s"] }),
    want: "h100s/H100",
  },
  {
    name: "GPU priority: falls back to the second type when the first is all taken",
    agents: [
      agent("a100s", 16, 64, { A100: 4 }),
      agent("h100s", 16, 64, { H100: 4 }, { usedGpus: { H100: 4 } }),
    ],
    req: req({ gpuTypes: ["H100", "A100"], gpuCount: 1 }),
    want: "a100s/A100",
  },
  {
    name: "GPU types match case-insensitively and come back in the agent's spelling",
    agents: [agent("a", 8, 32, { A10G: 1 })],
    req: req({ gpuTypes: ["a10g"], gpuCount: 1 }),
    want: "a/A10G",
  },
  {
    name: "GPU count: an agent with too few free devices is skipped",
    agents: [agent("one", 8, 32, { H100: 1 }), agent("two", 8, 32, { H100: 2 })],
    req: req({ gpuTypes: ["H100"], gpuCount: 2 }),
    want: "two/H100",
  },
  {
    name: "any GPU type: the smallest type pool that fits",
    agents: [agent("mixed", 8, 32, { A100: 8, T4: 2 })],
    req: req({ gpuCount: 2 }),
    want: "mixed/T4",
  },
  {
    name: "GPU requests still need cpu and memory",
    agents: [agent("gpu-full", 8, 32, { H100: 8 }, { usedMemGiB: 32 }), agent("gpu-ok", 8, 32, { H100: 1 })],
    req: req({ gpuTypes: ["H100"], gpuCount: 1 }),
    want: "gpu-ok/H100",
  },
  {
    name: "ties are broken by agent id",
    agents: [agent("b", 4, 8), agent("a", 4, 8)],
    req: req({}),
    want: "a",
  },
  {
    name: "zero-cpu request fits anywhere",
    agents: [agent("a", 1, 1, {}, { usedCpu: 1 })],
    req: { cpuMillicores: 0, memoryBytes: 0, gpuTypes: [], gpuCount: 0 },
    want: "a",
  },
  // ---- failures ----
  {
    name: "no agents at all is temporary",
    agents: [],
    req: req({}),
    want: { permanent: false, reason: /no agent is ready/ },
  },
  {
    name: "too many cores for any agent is permanent and names the largest",
    agents: [agent("a", 16, 64), agent("b", 8, 128)],
    req: req({ cpu: 64 }),
    want: {
      permanent: true,
      reason: /no agent can fit cpu=64 memory=1 GiB; the largest agent has cpu=16 \(a\)/,
    },
  },
  {
    name: "too much memory for any agent is permanent",
    agents: [agent("a", 16, 64), agent("b", 8, 128)],
    req: req({ memGiB: 512 }),
    want: { permanent: true, reason: /memory=512 GiB.*the largest agent has memory=128 GiB \(b\)/ },
  },
  {
    name: "a GPU type the fleet lacks is permanent and lists the fleet's GPUs",
    agents: [agent("a", 16, 64, { A10G: 2 }), agent("b", 16, 64)],
    req: req({ gpuTypes: ["H100"], gpuCount: 1 }),
    want: { permanent: true, reason: /no agent has 1 GPU\(s\) of type H100 \(fleet GPUs: 2xA10G\)/ },
  },
  {
    name: "GPUs on a fleet without any is permanent",
    agents: [agent("a", 16, 64)],
    req: req({ gpuCount: 1 }),
    want: { permanent: true, reason: /fleet GPUs: none/ },
  },
  {
    name: "dimensions that fit separately but never together are permanent",
    agents: [agent("cpu-box", 64, 8), agent("mem-box", 4, 512)],
    req: req({ cpu: 32, memGiB: 256 }),
    want: { permanent: true, reason: /no single agent has all of it together/ },
  },
  {
    name: "full right now but fits an empty agent is temporary",
    agents: [agent("a", 4, 8, {}, { usedCpu: 4 }), agent("b", 4, 8, {}, { usedMemGiB: 8 })],
    req: req({ cpu: 2 }),
    want: { permanent: false, reason: /every agent is full for cpu=2.*emptiest agent/ },
  },
  {
    name: "all GPUs of the type taken is temporary",
    agents: [agent("a", 16, 64, { H100: 2 }, { usedGpus: { H100: 2 } })],
    req: req({ gpuTypes: ["H100"], gpuCount: 1 }),
    want: { permanent: false, reason: /every agent is full/ },
  },
  {
    name: "a fitting agent that is not ready yet is temporary",
    agents: [agent("a", 16, 64, {}, { ready: false })],
    req: req({}),
    want: { permanent: false, reason: /no agent accepts containers right now/ },
  },
  {
    name: "a negative request is refused as permanent",
    agents: [agent("a", 16, 64)],
    req: { cpuMillicores: -1, memoryBytes: 1, gpuTypes: [], gpuCount: 0 },
    want: { permanent: true, reason: /cpu must be a non-negative number/ },
  },
];

describe("place", () => {
  for (const c of cases) {
    test(c.name, () => {
      const got = place({ agents: c.agents }, c.req);
      if (typeof c.want === "string") {
        assert.ok(got.ok, `expected a placement, got ${JSON.stringify(got)}`);
        assert.equal(got.gpuType ? `${got.agentId}/${got.gpuType}` : got.agentId, c.want);
      } else {
        assert.ok(!got.ok, `expected no placement, got ${JSON.stringify(got)}`);
        assert.equal(got.permanent, c.want.permanent, got.reason);
        assert.match(got.reason, c.want.reason);
      }
    });
  }
});

function capacity(
  cpuCores: number,
  memGiB: number,
  devices: Partial<GpuDevice>[] = [],
  available = true,
): HostCapacity {
  return {
    cpuCores,
    memoryBytes: memGiB * GiB,
    disk: { path: "/", totalBytes: 1, freeBytes: 1 },
    gpus: {
      available,
      toolkit: true,
      devices: devices.map((d, index) => ({
        index,
        model: "m",
        memoryMiB: 1,
        uuid: `u${index}`,
        type: "H100",
        ...d,
      })),
    },
  };
}

function live(agentId: string, cap: HostCapacity, state: LiveAgent["state"] = "ready"): LiveAgent {
  return {
    agentId,
    state,
    lastSeen: 0,
    heartbeat: {
      agentId,
      hostname: agentId,
      version: "t",
      sentAt: 0,
      intervalMs: 1000,
      grpcAddress: "127.0.0.1:1",
      capacity: cap,
    },
  };
}

describe("buildClusterView", () => {
  test("subtracts reservations and skips agents that are not ready", () => {
    const gpus = [{ uuid: "g0" }, { uuid: "g1" }, { uuid: "g2", type: "A100" }];
    const agents = [
      live("a", capacity(8, 32, gpus)),
      live("b", capacity(4, 8), "lost"),
      live("c", capacity(2.5, 4)),
    ];
    const res: Reservation[] = [
      {
        agentId: "a",
        cpuMillicores: 1500,
        memoryBytes: 4 * GiB,
        gpuType: "H100",
        gpuCount: 1,
        gpuUuids: ["g1"],
      },
      { agentId: "a", cpuMillicores: 500, memoryBytes: GiB, gpuType: "H100", gpuCount: 1 },
      { agentId: "c", cpuMillicores: 1000, memoryBytes: GiB, gpuCount: 0 },
      { agentId: "b", cpuMillicores: 1000, memoryBytes: GiB, gpuCount: 0 },
    ];
    const view: ClusterView = buildClusterView(agents, res, (id) => id !== "c");
    assert.deepEqual(
      view.agents.map((a) => a.agentId),
      ["a", "c"],
    );
    const [a, c] = view.agents as [AgentView, AgentView];
    assert.deepEqual(a.total, {
      cpuMillicores: 8000,
      memoryBytes: 32 * GiB,
      gpus: { H100: ["g0", "g1"], A100: ["g2"] },
    });
    // g1 by uuid, and one more H100 (not yet known which) for the second reservation.
    assert.deepEqual(a.free, {
      cpuMillicores: 6000,
      memoryBytes: 27 * GiB,
      gpus: { H100: [], A100: ["g2"] },
    });
    assert.equal(a.ready, true);
    assert.equal(c.ready, false);
    assert.deepEqual(c.free, { cpuMillicores: 1500, memoryBytes: 3 * GiB, gpus: {} });
  });

  test("GPUs an agent does not offer are not schedulable", () => {
    const view = buildClusterView([live("a", capacity(8, 32, [{ uuid: "g0" }], false))], []);
    assert.deepEqual(view.agents[0]?.total.gpus, {});
    const got = place(view, req({ gpuCount: 1 }));
    assert.equal(got.ok, false);
  });
});
