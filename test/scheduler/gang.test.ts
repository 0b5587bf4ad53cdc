// Gangs (shared/gang.ts): the planner's reserveGang() puts N members on N
// distinct agents that have a gang address and commits them, or places
// none and leaves nothing held; gangAddressOf() says which address an
// agent's heartbeat gives for the gang's network.

import assert from "node:assert/strict";
import { describe, it, test } from "node:test";
import {
  type ContainerOwner,
  type PlacementRequest,
  Planner,
  gangAddressOf,
} from "../../coordinator/scheduler/index.ts";
import type { Heartbeat, HostCapacity } from "../../shared/fleet.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";

const cpu = (cores: number): PlacementRequest => ({
  cpuMillicores: cores * 1000,
  memoryBytes: 1024 ** 2,
  gpuTypes: [],
  gpuCount: 0,
});

type Host = [string, HostCapacity, Partial<Pick<Heartbeat, "nodeAddress" | "grpcAddress">>?];

/** A host reached at 10.0.0.<n> for gangs (its node address). */
const host = (name: string, n: number, cap = capacity(4, 16)): Host => [
  name,
  cap,
  { nodeAddress: `10.0.0.${n}` },
];
/** A host whose only address is loopback gRPC: it takes no gang member. */
const loopback = (name: string, cap = capacity(4, 16)): Host => [name, cap];

const member = (id: string, placement = cpu(1)) => ({
  id,
  kind: "runner",
  workspaceId: "ws-1",
  stubId: "stub-g",
  placement,
});

const H100 = (uuid: string) => ({ type: "H100", uuid });

interface GangCase {
  name: string;
  fleet: Host[];
  req: PlacementRequest;
  size: number;
  /** "agent@address[:gpuType]" by rank, or the refusal's reason. */
  want: string[] | RegExp;
}

const cases: GangCase[] = [
  {
    name: "2 hosts: a gang of 2 takes both",
    fleet: [host("a", 1), host("b", 2)],
    req: cpu(1),
    size: 2,
    want: ["a@10.0.0.1", "b@10.0.0.2"],
  },
  {
    name: "1 host: a gang of 2 is not placed and says how many hosts can take it",
    fleet: [host("a", 1)],
    req: cpu(1),
    size: 2,
    want: /^a gang of 2 needs 2 hosts; 1 can take it now$/,
  },
  {
    name: "an agent without a gang address is skipped",
    fleet: [loopback("a"), host("b", 2), host("c", 3)],
    req: cpu(1),
    size: 2,
    want: ["b@10.0.0.2", "c@10.0.0.3"],
  },
  {
    name: "too few agents with a gang address: the reason names the others",
    fleet: [loopback("a"), host("b", 2)],
    req: cpu(1),
    size: 2,
    want: /^a gang of 2 needs 2 hosts; 1 can take it now \(1 agent\(s\) have no node address.*--node-address\)\)$/,
  },
  {
    name: "a host too small is not counted: the reason says what holds it back",
    fleet: [host("a", 1), host("b", 2, capacity(1, 16))],
    req: cpu(2),
    size: 2,
    want: /^a gang of 2 needs 2 hosts; 1 can take it now \(the others: every agent is full for cpu=2 .*the emptiest agent b has cpu=1 /,
  },
  {
    name: "GPUs per member: each rank gets its GPUs on its own host",
    fleet: [
      host("a", 1, capacity(8, 64, [H100("GPU-a1"), H100("GPU-a2")])),
      host("b", 2, capacity(8, 64)),
      host("c", 3, capacity(8, 64, [H100("GPU-c1"), H100("GPU-c2")])),
    ],
    req: { ...cpu(1), gpuTypes: ["H100"], gpuCount: 2 },
    size: 2,
    want: ["a@10.0.0.1:H100", "c@10.0.0.3:H100"],
  },
  {
    name: "a GPU count no host has is refused for good",
    fleet: [host("a", 1, capacity(8, 64, [H100("GPU-a1")])), host("b", 2, capacity(8, 64, [H100("GPU-b1")]))],
    req: { ...cpu(1), gpuTypes: ["H100"], gpuCount: 2 },
    size: 2,
    want: /no agent can fit cpu=1 memory=1 MiB gpu=2xH100/,
  },
];

describe("reserveGang placements", () => {
  for (const c of cases) {
    it(c.name, () => {
      const p = new Planner({ fleet: fleetOf(c.fleet) });
      const got = p.reserveGang(Array.from({ length: c.size }, (_, rank) => member(`ctr-${rank}`, c.req)));
      if (Array.isArray(c.want)) {
        assert.ok(got.ok, got.ok ? "" : got.reason);
        assert.deepEqual(
          got.members.map(
            (m) =>
              `${m.reservation.agentId}@${m.gangAddress}${m.reservation.gpuType ? `:${m.reservation.gpuType}` : ""}`,
          ),
          c.want,
        );
      } else {
        assert.ok(!got.ok, "placed");
        assert.match(got.reason, c.want);
        assert.deepEqual(p.list(), [], "a gang not placed holds nothing");
      }
    });
  }
});

test("gangAddressOf: the node address, else a gRPC host that is not loopback", () => {
  const of = (nodeAddress: string | undefined, grpcAddress: string) =>
    gangAddressOf({ grpcAddress, ...(nodeAddress !== undefined ? { nodeAddress } : {}) });
  assert.equal(of("192.168.1.7", "127.0.0.1:7443"), "192.168.1.7");
  assert.equal(of(undefined, "10.1.2.3:7443"), "10.1.2.3");
  assert.equal(of(undefined, "[fd00::5]:7443"), "fd00::5");
  assert.equal(of(undefined, "gpu-7.internal:7443"), "gpu-7.internal");
  assert.equal(of("  ", "10.1.2.3:7443"), "10.1.2.3");
  for (const g of ["127.0.0.1:1", "localhost:7443", "[::1]:7443", "0.0.0.0:7443", ""])
    assert.equal(of(undefined, g), undefined, g);
});

/** An owner offering `idle` as idle warm containers and recording what it is asked to stop. */
function owner(p: Planner, idle: string[]) {
  const stopped: string[] = [];
  const o: ContainerOwner = {
    idle: () => idle.map((id, i) => ({ id, idleSince: i })),
    stop: (ids) => stopped.push(...ids),
  };
  p.addOwner(o);
  return stopped;
}

test("reserveGang: a gang of 2 on 2 hosts holds one reservation on each, with their addresses", () => {
  const p = new Planner({ fleet: fleetOf([host("a", 1), host("b", 2), loopback("c")]) });
  const got = p.reserveGang([member("ctr-0"), member("ctr-1")]);
  assert.ok(got.ok, got.ok ? "" : got.reason);
  assert.deepEqual(
    got.members.map((m) => [m.reservation.id, m.reservation.agentId, m.gangAddress]),
    [
      ["ctr-0", "a", "10.0.0.1"],
      ["ctr-1", "b", "10.0.0.2"],
    ],
  );
  assert.equal(p.usage("ws-1").containers, 2);
});

test("reserveGang: 1 host for a gang of 2 reserves nothing and stops nothing", () => {
  const p = new Planner({ fleet: fleetOf([host("a", 1, capacity(2, 16))]) });
  // An idle container of another stub fills the host: making room would stop it, for a gang that cannot fit anyway.
  assert.ok(p.reserve({ ...member("ctr-idle", cpu(2)), stubId: "stub-other" }).ok);
  const stopped = owner(p, ["ctr-idle"]);
  const got = p.reserveGang([member("ctr-0"), member("ctr-1")]);
  assert.ok(!got.ok, "placed");
  assert.equal(got.permanent, false);
  assert.match(got.reason, /^a gang of 2 needs 2 hosts; 1 can take it now/);
  assert.deepEqual(
    p.list().map((h) => h.id),
    ["ctr-idle"],
  );
  assert.deepEqual(stopped, []);
});

test("reserveGang: a gang past a workspace limit as a whole releases the members it made", () => {
  const p = new Planner({ fleet: fleetOf([host("a", 1), host("b", 2)]) });
  const limits = { maxContainers: 1, maxCpuMillicores: null, maxMemoryMb: null, maxGpus: null };
  const got = p.reserveGang([
    { ...member("ctr-0"), limits },
    { ...member("ctr-1"), limits },
  ]);
  assert.ok(!got.ok, "placed");
  assert.equal(got.limit, "maxContainers");
  assert.match(got.reason, /^a gang of 2 cannot be placed whole: rank 1: /);
  assert.deepEqual(p.list(), []);
  assert.equal(p.usage("ws-1").containers, 0);
  // The room is free again: a plain container takes it.
  assert.ok(p.reserve({ ...member("ctr-x"), limits }).ok);
});

test("reserveGang: ids already held are refused before anything is placed", () => {
  const p = new Planner({ fleet: fleetOf([host("a", 1), host("b", 2)]) });
  assert.ok(p.reserve(member("ctr-1")).ok);
  assert.throws(() => p.reserveGang([member("ctr-0"), member("ctr-1")]), /ctr-1 already holds a reservation/);
  assert.deepEqual(
    p.list().map((h) => h.id),
    ["ctr-1"],
  );
});
