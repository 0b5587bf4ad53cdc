// Placements per second of the one planner (coordinator/scheduler/planner.ts,
// its reserve() commit path with the pure planPlacement() and the placement
// index) on a simulated fleet of 10,000 agents, against the same request
// stream on 100 agents (the reference), interleaved round by round, on one
// core. A third row times planPlacement() without the index (the path before
// it: place() over the whole fleet) on the 10,000-agent state, for scale.
// Usage: node --import tsx bench/scheduler/run.ts [--agents 10000] [--reference 100]
//          [--placements 100000] [--rounds 3] [--seed 1]

import { spawnSync } from "node:child_process";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import {
  type Held,
  type PlacementRequest,
  Planner,
  planPlacement,
} from "../../coordinator/scheduler/index.ts";
import type { ContainerLimits } from "../../coordinator/scheduler/quota.ts";
import type { Heartbeat, HostCapacity } from "../../shared/fleet.ts";
import { benchHostCapacity, mulberry32 as rng } from "../../test/helpers/seeded-fleet.ts";
import { machineInfo } from "../lib/machine.ts";
import { formatTable, summarize, writeResults } from "../lib/stats.ts";

const MiB = 1024 ** 2;

const { values: args } = parseArgs({
  options: {
    agents: { type: "string", default: "10000" },
    reference: { type: "string", default: "100" },
    placements: { type: "string", default: "100000" },
    rounds: { type: "string", default: "3" },
    seed: { type: "string", default: "1" },
    "heartbeat-every": { type: "string", default: "25" },
    "full-scan": { type: "string", default: "100" },
  },
});

// One core: re-run pinned to CPU 0 unless already pinned (taskset is util-linux, on every Debian).
if (!process.env.BERTH_BENCH_PINNED) {
  const r = spawnSync(
    "taskset",
    [
      "-c",
      "0",
      process.execPath,
      ...process.execArgv,
      fileURLToPath(import.meta.url),
      ...process.argv.slice(2),
    ],
    { stdio: "inherit", env: { ...process.env, BERTH_BENCH_PINNED: "1" } },
  );
  if (r.error) throw new Error(`taskset -c 0 could not run the benchmark pinned: ${r.error.message}`);
  process.exit(r.status ?? 1);
}

const int = (name: string, v: string | undefined, min: number) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}, got ${v}`);
  return n;
};
const AGENTS = int("agents", args.agents, 1);
const REFERENCE = int("reference", args.reference, 1);
const PLACEMENTS = int("placements", args.placements, 1000);
const ROUNDS = int("rounds", args.rounds, 1);
const SEED = int("seed", args.seed, 0);
const HEARTBEAT_EVERY = int("heartbeat-every", args["heartbeat-every"], 0);
const FULL_SCAN = int("full-scan", args["full-scan"], 0);
/** Containers per agent kept running: about half of a CPU host's cores are held in steady state. */
const DENSITY = 10;

/** The fleet: bench/scheduler's shape (test/helpers/seeded-fleet.ts), shared with the planner's equivalence tests. */
const capacityOf = (i: number): HostCapacity => benchHostCapacity(i);

const agentId = (i: number) => `agent-${i.toString(36).padStart(4, "0")}`;

function heartbeat(i: number): Heartbeat {
  return {
    agentId: agentId(i),
    hostname: `host-${i}`,
    version: "bench",
    sentAt: 0,
    intervalMs: 3_600_000,
    grpcAddress: `10.0.${i >> 8}.${i & 255}:8421`,
    capacity: capacityOf(i),
  };
}

interface Req {
  workspaceId: string;
  stubId: string;
  placement: PlacementRequest;
  limits?: ContainerLimits;
}

/**
 * The request stream, the same for every fleet size: 94% CPU-only (0.25-4
 * cores, 0.5-16 GiB), 4% H100 (1, 2, 4 or 8), 2% "A10G or L4" or any GPU
 * (so that in steady state the GPUs are about 80% and 50% held);
 * one in five prefers two agents (where its image is cached), one in three
 * carries its workspace's limits.
 */
function requests(n: number, seed: number): Req[] {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)] as T;
  const out: Req[] = [];
  for (let i = 0; i < n; i++) {
    const k = r();
    const gpu: Pick<PlacementRequest, "gpuTypes" | "gpuCount"> =
      k < 0.94
        ? { gpuTypes: [], gpuCount: 0 }
        : k < 0.98
          ? { gpuTypes: ["H100"], gpuCount: pick([1, 1, 2, 4, 8]) }
          : { gpuTypes: pick([["A10G", "L4"], []]), gpuCount: 1 };
    const placement: PlacementRequest = {
      cpuMillicores: pick([250, 500, 1000, 2000, 4000]),
      memoryBytes: pick([512, 1024, 2048, 4096, 16384]) * MiB,
      ...gpu,
    };
    // Agent numbers in 0..1e6, taken modulo the fleet size when used.
    if (r() < 0.2) placement.preferAgents = [String(Math.floor(r() * 1e6)), String(Math.floor(r() * 1e6))];
    const ws = Math.floor(r() * 500);
    out.push({
      workspaceId: `ws-${ws}`,
      stubId: `stub-${Math.floor(r() * 5000)}`,
      placement,
      ...(r() < 0.33
        ? { limits: { maxContainers: 5000, maxCpuMillicores: null, maxMemoryMb: null, maxGpus: 2000 } }
        : {}),
    });
  }
  return out;
}

function forFleet(req: Req, agents: number): Req {
  const prefer = req.placement.preferAgents;
  if (!prefer) return req;
  return {
    ...req,
    placement: { ...req.placement, preferAgents: prefer.map((p) => agentId(Number(p) % agents)) },
  };
}

interface RunResult {
  agents: number;
  fill: { placements: number; seconds: number };
  placements: number;
  refused: number;
  seconds: number;
  perSecond: number;
  /** CPU time the process used during the timed loop (user + system, all threads), and placements per CPU second. */
  cpuSeconds: number;
  perCpuSecond: number;
  /** Latency of single reserve() calls (µs), every 100th call. */
  latencyUs: number[];
  liveAtEnd: number;
  /** The machine's 1-minute load average before and after the timed loop (other work on a shared machine shows here). */
  load: [number, number];
}

interface Setup {
  fleet: FleetView;
  planner: Planner;
  live: string[];
}

function setup(agents: number): Setup {
  const fleet = new FleetView();
  for (let i = 0; i < agents; i++) fleet.observe(heartbeat(i), 0);
  return { fleet, planner: new Planner({ fleet }), live: [] };
}

/** Fills the fleet to its steady state, then times `stream` placements, each after releasing the oldest container. */
function run(agents: number, fill: Req[], stream: Req[]): RunResult & { state: Setup } {
  const state = setup(agents);
  const { fleet, planner, live } = state;
  const target = agents * DENSITY;
  let seq = 0;
  let head = 0;
  const reserve = (req: Req) => {
    const id = `ctr-${seq++}`;
    const res = planner.reserve({ id, kind: "runner", ...forFleet(req, agents) });
    if (res.ok) live.push(id);
    return res.ok;
  };
  const t0 = performance.now();
  let filled = 0;
  for (let i = 0; live.length - head < target && i < fill.length; i++) {
    reserve(fill[i] as Req);
    filled++;
  }
  const fillSeconds = (performance.now() - t0) / 1000;
  let refused = 0;
  const latencyUs: number[] = [];
  let hb = 0;
  const load0 = loadavg()[0] ?? Number.NaN;
  const t1 = performance.now();
  const c1 = process.cpuUsage();
  for (let i = 0; i < stream.length; i++) {
    if (live.length - head >= target) planner.release(live[head++] as string);
    if (HEARTBEAT_EVERY > 0 && i % HEARTBEAT_EVERY === 0) fleet.observe(heartbeat(hb++ % agents), 0);
    const req = stream[i] as Req;
    if (i % 100 === 0) {
      const s = performance.now();
      if (!reserve(req)) refused++;
      latencyUs.push((performance.now() - s) * 1000);
    } else if (!reserve(req)) refused++;
  }
  const seconds = (performance.now() - t1) / 1000;
  const cpu = process.cpuUsage(c1);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;
  live.splice(0, head);
  return {
    agents,
    fill: { placements: filled, seconds: fillSeconds },
    placements: stream.length - refused,
    refused,
    seconds,
    perSecond: (stream.length - refused) / seconds,
    cpuSeconds,
    perCpuSecond: (stream.length - refused) / cpuSeconds,
    latencyUs,
    liveAtEnd: live.length,
    load: [load0, loadavg()[0] ?? Number.NaN],
    state,
  };
}

/** planPlacement() without the index on the same state: place() over every agent, as before the index. */
function fullScan(
  state: Setup,
  stream: Req[],
  n: number,
  agents: number,
): { perSecond: number; agreed: number; n: number } {
  const agentsList = state.fleet.list();
  const held: Held[] = state.planner.list();
  let agreed = 0;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const want = forFleet(stream[i] as Req, agents);
    planPlacement({ agents: agentsList, held, idle: [], want });
  }
  const seconds = (performance.now() - t0) / 1000;
  // Untimed: the indexed planner decides the same on this state.
  for (let i = 0; i < n; i++) {
    const want = forFleet(stream[i] as Req, agents);
    const a = planPlacement({ agents: agentsList, held, idle: [], want });
    const b = state.planner.reserve({ id: `check-${i}`, kind: "runner", ...want });
    if (b.ok) state.planner.release(`check-${i}`);
    if ((a.ok && b.ok && a.agentId === b.reservation.agentId) || (!a.ok && !b.ok)) agreed++;
  }
  return { perSecond: n / seconds, agreed, n };
}

const stream = requests(PLACEMENTS, SEED);
const fillStream = requests(AGENTS * DENSITY * 2, SEED + 1);
const results: { round: number; fleet: string; result: Omit<RunResult, "state"> }[] = [];
const scans: { round: number; perSecond: number; agreed: number; n: number }[] = [];
console.log(
  `scheduler bench: ${AGENTS} vs ${REFERENCE} agents, ${PLACEMENTS} placements per run, ${ROUNDS} rounds, pinned to CPU 0`,
);
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? [AGENTS, REFERENCE] : [REFERENCE, AGENTS];
  for (const agents of order) {
    // The fill stream is separate so both fleets then see exactly the same timed requests.
    const filler = fillStream.slice(0, agents * DENSITY * 2);
    // Warm-up (JIT), discarded.
    if (round === 0) run(agents, filler, stream.slice(0, Math.min(stream.length, 20_000)));
    const r = run(agents, filler, stream);
    const { state, ...result } = r;
    results.push({ round, fleet: agents === AGENTS ? "large" : "reference", result });
    console.log(
      `round ${round + 1}: ${agents} agents: ${Math.round(r.perSecond)} placements/s wall, ${Math.round(r.perCpuSecond)} per CPU second (${r.placements} placed, ${r.refused} refused, fill ${r.fill.placements} in ${r.fill.seconds.toFixed(2)} s, load ${r.load.map((l) => l.toFixed(1)).join(" -> ")})`,
    );
    if (agents === AGENTS && FULL_SCAN > 0) {
      const s = fullScan(state, stream, FULL_SCAN, agents);
      scans.push({ round, ...s });
      console.log(
        `round ${round + 1}: ${agents} agents, planPlacement without the index: ${Math.round(s.perSecond)} decisions/s (${s.agreed}/${s.n} the same as the planner's)`,
      );
    }
  }
}

const rows = (["large", "reference"] as const).map((fleet) => {
  const rs = results.filter((x) => x.fleet === fleet).map((x) => x.result);
  return {
    fleet,
    agents: rs[0]?.agents ?? 0,
    wall: summarize(rs.map((x) => x.perSecond)),
    cpu: summarize(rs.map((x) => x.perCpuSecond)),
    lat: summarize(rs.flatMap((x) => x.latencyUs)),
  };
});
const ref = rows[1]?.cpu.p50 ?? Number.NaN;
const scanRate = summarize(scans.map((s) => s.perSecond)).p50;
const table = formatTable(
  [
    "fleet",
    "agents",
    "placements/s, wall (min / median)",
    "placements per CPU second (min / median)",
    "vs reference (CPU)",
    "reserve() p50 µs",
    "reserve() p95 µs",
  ],
  [
    ...rows.map((r) => [
      r.fleet === "large" ? "large" : "reference",
      String(r.agents),
      `${Math.round(r.wall.min)} / ${Math.round(r.wall.p50)}`,
      `${Math.round(r.cpu.min)} / ${Math.round(r.cpu.p50)}`,
      `${(r.cpu.p50 / ref).toFixed(2)}x`,
      r.lat.p50.toFixed(1),
      r.lat.p95.toFixed(1),
    ]),
    ...(scans.length > 0
      ? [
          [
            "large, planPlacement() without the index (decisions)",
            String(AGENTS),
            String(Math.round(scanRate)),
            "-",
            "-",
            "-",
            "-",
          ],
        ]
      : []),
  ],
);
console.log(`\n${table}\n`);
const path = writeResults("scheduler", {
  machine: machineInfo(),
  node: process.version,
  options: {
    agents: AGENTS,
    reference: REFERENCE,
    placements: PLACEMENTS,
    rounds: ROUNDS,
    seed: SEED,
    heartbeatEvery: HEARTBEAT_EVERY,
    density: DENSITY,
  },
  runs: results,
  fullScan: scans,
  summary: rows,
});
console.log(`results: ${path}`);
