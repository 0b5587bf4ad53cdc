// Priorities and preemption in the planner (coordinator/scheduler/plan.ts):
// which running containers a request of a higher priority preempts when
// nothing else makes room, and that nothing non-preemptible, of the same
// priority or higher, is ever chosen. Then the planner commits such a plan:
// the owner is asked to preempt, and the room is the request's once the
// victims are released.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  type Held,
  type IdleCandidate,
  type PlacementRequest,
  Planner,
  type PreemptCandidate,
  planPlacement,
} from "../../coordinator/scheduler/index.ts";
import { capacity, fleetOf, oneAgentFleet } from "../containers/fakes.ts";

const cpu = (cores: number): PlacementRequest => ({
  cpuMillicores: cores * 1000,
  memoryBytes: 1024 ** 2,
  gpuTypes: [],
  gpuCount: 0,
});

const held = (id: string, cores: number, agentId = "agent-a"): Held => ({
  id,
  kind: "runner",
  workspaceId: "ws-low",
  stubId: `stub-${id}`,
  agentId,
  cpuMillicores: cores * 1000,
  memoryBytes: 0,
  gpuCount: 0,
});

interface Row {
  name: string;
  agents?: [string, number][];
  held: Held[];
  idle?: IdleCandidate[];
  preemptible: PreemptCandidate[];
  want: { cores: number; priority?: number };
  expect: { agentId: string; stop: string[]; preempt?: string[] } | RegExp;
}

const rows: Row[] = [
  {
    name: "a full host: the newest of equal-priority victims goes",
    held: [held("a", 4), held("b", 4)],
    preemptible: [
      { id: "a", priority: 0, startedAt: 1 },
      { id: "b", priority: 0, startedAt: 2 },
    ],
    want: { cores: 4, priority: 5 },
    expect: { agentId: "agent-a", stop: [], preempt: ["b"] },
  },
  {
    name: "the lowest priority goes first, however old",
    held: [held("a", 4), held("b", 4)],
    preemptible: [
      { id: "a", priority: 1, startedAt: 2 },
      { id: "b", priority: 0, startedAt: 1 },
    ],
    want: { cores: 4, priority: 5 },
    expect: { agentId: "agent-a", stop: [], preempt: ["b"] },
  },
  {
    name: "as many victims as the request needs, and no more",
    held: [held("a", 2), held("b", 2), held("c", 4)],
    preemptible: [
      { id: "a", priority: 0, startedAt: 3 },
      { id: "b", priority: 0, startedAt: 2 },
      { id: "c", priority: 2, startedAt: 1 },
    ],
    want: { cores: 4, priority: 5 },
    expect: { agentId: "agent-a", stop: [], preempt: ["a", "b"] },
  },
  {
    name: "non-preemptible work is never chosen, whatever the request's priority",
    held: [held("a", 4), held("b", 4)],
    preemptible: [],
    want: { cores: 4, priority: 1000 },
    expect: /no idle warm container can be stopped/,
  },
  {
    name: "work of the same priority is not preempted",
    held: [held("a", 4), held("b", 4)],
    preemptible: [
      { id: "a", priority: 5, startedAt: 1 },
      { id: "b", priority: 5, startedAt: 2 },
    ],
    want: { cores: 4, priority: 5 },
    expect: /no idle warm container can be stopped/,
  },
  {
    name: "a request of the default priority 0 preempts nothing",
    held: [held("a", 8)],
    preemptible: [{ id: "a", priority: 0, startedAt: 1 }],
    want: { cores: 1 },
    expect: /no idle warm container can be stopped/,
  },
  {
    name: "only higher-priority victims on the host: refused, the preemptible one alone is too small",
    held: [held("a", 2), held("b", 6)],
    preemptible: [{ id: "a", priority: 0, startedAt: 1 }],
    want: { cores: 4, priority: 5 },
    expect: /no idle warm container can be stopped/,
  },
  {
    name: "idle containers alone make room: nothing is preempted",
    held: [held("a", 2), held("b", 4), held("c", 2)],
    idle: [{ id: "c", idleSince: 1 }],
    preemptible: [{ id: "b", priority: 0, startedAt: 1 }],
    want: { cores: 2, priority: 5 },
    expect: { agentId: "agent-a", stop: ["c"] },
  },
  {
    name: "an idle container the victim's room makes unneeded stays",
    held: [held("a", 2), held("b", 4), held("c", 2)],
    idle: [{ id: "c", idleSince: 1 }],
    preemptible: [{ id: "b", priority: 0, startedAt: 1 }],
    want: { cores: 4, priority: 5 },
    expect: { agentId: "agent-a", stop: [], preempt: ["b"] },
  },
  {
    name: "the agent needing the fewest victims takes it",
    agents: [
      ["agent-a", 8],
      ["agent-b", 8],
    ],
    held: [held("a1", 2), held("a2", 2), held("a3", 4), held("b1", 4, "agent-b"), held("b2", 4, "agent-b")],
    preemptible: [
      { id: "a1", priority: 0, startedAt: 9 },
      { id: "a2", priority: 0, startedAt: 8 },
      { id: "b1", priority: 1, startedAt: 1 },
    ],
    want: { cores: 4, priority: 5 },
    expect: { agentId: "agent-b", stop: [], preempt: ["b1"] },
  },
];

describe("the planner's choice of victims", () => {
  for (const r of rows) {
    test(r.name, () => {
      const fleet = fleetOf((r.agents ?? [["agent-a", 8]]).map(([id, cores]) => [id, capacity(cores, 64)]));
      const plan = planPlacement({
        agents: fleet.list(),
        held: r.held,
        idle: r.idle ?? [],
        preemptible: r.preemptible,
        want: {
          workspaceId: "ws-high",
          stubId: "stub-high",
          placement: cpu(r.want.cores),
          ...(r.want.priority !== undefined ? { priority: r.want.priority } : {}),
        },
      });
      if (r.expect instanceof RegExp) {
        assert.ok(!plan.ok, JSON.stringify(plan));
        assert.match(plan.reason, r.expect);
      } else {
        assert.deepEqual(plan, { ok: true, ...r.expect });
      }
    });
  }
});

test("reserve asks the owner to preempt; the room is the request's once the victim is released", async () => {
  const p = new Planner({ fleet: oneAgentFleet("agent-a", capacity(8, 64)) });
  const preempted: { ids: string[]; reason: string }[] = [];
  const stopped: string[] = [];
  p.addOwner({
    idle: () => [],
    stop: (ids) => stopped.push(...ids),
    preemptible: () => [
      { id: "low-1", priority: 0, startedAt: 1 },
      { id: "low-2", priority: 0, startedAt: 2 },
    ],
    preempt: (ids, reason) => preempted.push({ ids, reason }),
  });
  for (const id of ["low-1", "low-2"])
    assert.ok(p.reserve({ id, kind: "runner", workspaceId: "ws", stubId: "low", placement: cpu(4) }).ok);
  // The same priority as the victims: refused.
  assert.equal(
    p.reserve({ id: "even", kind: "runner", workspaceId: "ws", stubId: "even", placement: cpu(4) }).ok,
    false,
  );
  const r = p.reserve({
    id: "high",
    kind: "runner",
    workspaceId: "ws",
    stubId: "high",
    priority: 10,
    placement: cpu(4),
  });
  assert.ok(r.ok);
  assert.deepEqual(r.stopping, ["low-2"]);
  assert.deepEqual(stopped, []);
  assert.deepEqual(preempted, [
    { ids: ["low-2"], reason: "preempted on agent-a for runner high (priority 10)" },
  ]);
  let ready = false;
  const waiting = p.whenReady("high", 60_000).then(() => {
    ready = true;
  });
  await Promise.resolve();
  assert.equal(ready, false);
  p.release("low-2");
  await waiting;
  assert.equal(ready, true);
  assert.deepEqual(
    p
      .list()
      .map((h) => h.id)
      .sort(),
    ["high", "low-1"],
  );
});
