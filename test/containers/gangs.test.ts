// Gang stubs (extra.nodes > 1, shared/gang.ts) in the container manager:
// each unit is N containers on N agents with their gang fields, placed all
// or none; a member's exit or failed start stops the rest; the gang counts
// as one container for demand and keep-warm.

import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import { adoptedRecord } from "../../coordinator/containers/container-table.ts";
import { MAX_GANG_VNI, MIN_GANG_VNI, pickVni } from "../../coordinator/containers/gangs.ts";
import { applyGang, runnerRequest } from "../../coordinator/containers/runner-request.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import type { RunContainerRequest } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { DEFAULT_GANG_SUBNET, GANG_MASTER_PORT, GangLabels } from "../../shared/gang.ts";
import { captureLog } from "../helpers/log-capture.ts";
import { type World, capacity, stubRecord, world } from "./fakes.ts";

/** A world with `hosts` agents reached at 10.0.0.<n> and a 2-node gang stub with `tasks` waiting. */
function gangWorld(t: TestContext, hosts: number, tasks = 1, keepWarm = 60) {
  const logs = captureLog();
  const w = world({ healthyAfterMs: 1000, log: logs.log });
  const agents = Array.from({ length: hosts }, (_, i) =>
    w.addAgent(`agent-${i}`, capacity(4, 16), { nodeAddress: `10.0.0.${i + 1}` }),
  );
  w.stubs.set(
    "stub-g",
    stubRecord("stub-g", { extra: { nodes: 2 }, config: { keep_warm_seconds: keepWarm } }),
  );
  w.activity.set("stub-g", tasks);
  t.after(() => w.mgr.stop());
  return { w, agents, logs };
}

/** The runs of every agent, rank order (each names its container: the manager picks the ids). */
const gangRuns = (w: World) =>
  [...w.agents.values()]
    .flatMap((a) => a.runs)
    .map((r) => {
      assert.ok(r.id, "a run without an id");
      return r as RunContainerRequest & { id: string };
    })
    .sort((x, y) => (x.gang?.rank ?? 0) - (y.gang?.rank ?? 0));

const stopsOf = (w: World) =>
  [...w.agents.values()].flatMap((a) => a.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1]));

test("a nodes=2 stub starts one gang: 2 containers on 2 agents with their ranks, hosts and labels", async (t) => {
  const { w, agents } = gangWorld(t, 3);
  await w.tick();
  const runs = gangRuns(w);
  assert.equal(runs.length, 2);
  const [r0, r1] = runs;
  assert.ok(r0?.gang && r1?.gang);
  assert.match(r0.gang.id, /^gang-[0-9a-f]+$/);
  assert.ok(r0.gang.vni >= MIN_GANG_VNI && r0.gang.vni <= MAX_GANG_VNI);
  const agentOf = (id: string) => agents.findIndex((a) => a.runs.some((r) => r.id === id));
  const hosts = [r0, r1].map((r) => `10.0.0.${agentOf(r.id) + 1}`);
  assert.notEqual(agentOf(r0.id), agentOf(r1.id), "distinct agents");
  for (const [rank, r] of [r0, r1].entries()) {
    assert.deepEqual(r.gang, {
      id: r0.gang.id,
      vni: r0.gang.vni,
      rank,
      size: 2,
      hosts,
      subnet: DEFAULT_GANG_SUBNET,
      masterPort: GANG_MASTER_PORT,
    });
    assert.equal(r.labels?.[GangLabels.gangId], r0.gang.id);
    assert.equal(r.labels?.[GangLabels.rank], String(rank));
    assert.equal(r.labels?.[GangLabels.size], "2");
    // Every member is a runner container of the stub (rank 0's runner takes the tasks).
    assert.equal(r.runner?.stubId, "stub-g");
  }
  // One gang is one container for demand: one task, one gang, and it counts once.
  assert.equal(w.mgr.activeContainers("stub-g"), 1);
  assert.equal(w.mgr.list().length, 2);
  await w.tick(1000);
  assert.equal(gangRuns(w).length, 2, "demand unchanged: no second gang");
  // Two tasks: two gangs (a gang runs one task at a time), on distinct VNIs.
  w.activity.set("stub-g", 1, 1);
  await w.tick(1000);
  const all = gangRuns(w);
  assert.equal(all.length, 4);
  assert.equal(w.mgr.activeContainers("stub-g"), 2);
  assert.equal(new Set(all.map((r) => r.gang?.id)).size, 2);
  assert.equal(new Set(all.map((r) => r.gang?.vni)).size, 2);
});

test("a member's exit stops the other member, naming the gang, the rank and why", async (t) => {
  const { w, logs } = gangWorld(t, 2);
  await w.tick();
  const [r0, r1] = gangRuns(w);
  assert.ok(r0?.gang && r1?.gang);
  const agentOf = (id: string) => w.mgr.list().find((c) => c.id === id)?.agentId as string;
  w.clock.now += 5000;
  w.mgr.start();
  w.emit({ agentId: agentOf(r1.id), containerId: r1.id, type: "exit", exitCode: 137, reason: "killed" });
  await w.mgr.settled();
  assert.deepEqual(stopsOf(w).sort(), [r0.id, r1.id].sort(), "rank 0 stopped; rank 1 removed on its agent");
  const why = `gang ${r0.gang.id}: rank 1 exited (killed, code 137); the other ranks are stopped`;
  const line = logs.lines().find((l) => l.msg === why);
  assert.ok(
    line,
    logs
      .lines()
      .map((l) => l.msg)
      .join("\n"),
  );
  assert.deepEqual(line.containers, [r0.id]);
  // Neither member is left; the task still waits, so a new gang (its own id) takes it.
  const ids = w.mgr.list().map((c) => c.id);
  assert.ok(!ids.includes(r0.id) && !ids.includes(r1.id), ids.join(", "));
  const next = gangRuns(w).filter((r) => r.gang?.id !== r0.gang?.id);
  assert.equal(next.length, 2);
  assert.equal(w.mgr.activeContainers("stub-g"), 1);
});

test("a member that cannot start ends the gang and releases every reservation", async (t) => {
  const { w, agents } = gangWorld(t, 2);
  // The second agent's run fails: whichever rank it holds.
  agents[1]?.failRun.push(new BerthError("internal", "runc: boom"));
  await w.tick();
  assert.equal(gangRuns(w).length, 2);
  // The member that started was stopped (or never left starting); nothing holds room.
  assert.deepEqual(
    w.mgr.list().filter((c) => c.state !== "stopping"),
    [],
  );
  assert.deepEqual(w.planner.list(), []);
  assert.equal(agents[0]?.containers.size, 0);
  assert.equal(w.mgr.startAttempts("stub-g"), 1, "one failed start for the gang");
  assert.match(w.mgr.startError("stub-g") ?? "", /runc: boom/);
});

test("a member still starting when its gang ends is stopped as soon as its agent has it", async (t) => {
  const { w, agents } = gangWorld(t, 2);
  let open = () => {};
  const a0 = agents[0];
  assert.ok(a0);
  a0.gate = new Promise<void>((r) => {
    open = r;
  });
  agents[1]?.failRun.push(new BerthError("internal", "runc: boom"));
  const ticking = w.tick();
  // Let the failed start end the gang while agent-0's start is held.
  const ended = () => {
    const left = w.mgr.list();
    return agents[1]?.runs.length === 1 && left.length === 1 && left[0]?.state === "stopping";
  };
  for (let i = 0; i < 1000 && !ended(); i++) await new Promise((r) => setImmediate(r));
  assert.ok(ended(), "the gang ended while agent-0's start was held");
  assert.equal(a0.count("stopContainer"), 0, "no stop before its agent has the container");
  open();
  await ticking;
  const [id] = a0.runs.map((r) => r.id);
  assert.deepEqual(
    a0.calls.filter((c) => c[0] === "stopContainer"),
    [["stopContainer", id, { graceMs: 0, remove: true }]],
  );
  assert.equal(a0.containers.size, 0);
  assert.deepEqual(w.mgr.list(), []);
  assert.deepEqual(w.planner.list(), []);
});

test("with 1 agent nothing starts and the stub's wait says why", async (t) => {
  const { w, agents } = gangWorld(t, 1);
  await w.tick();
  assert.equal(agents[0]?.runs.length, 0);
  assert.deepEqual(w.planner.list(), []);
  const wait = w.mgr.waitState("stub-g");
  assert.equal(wait?.kind, "no_room");
  assert.match(wait?.message ?? "", /^a gang of 2 needs 2 hosts; 1 can take it now/);
  assert.equal(w.activity.failed.length, 0, "the tasks wait (an agent may join)");
  // A second agent joins: the gang starts.
  w.addAgent("agent-9", capacity(4, 16), { nodeAddress: "10.0.0.9" });
  await w.tick(1000);
  assert.equal(gangRuns(w).length, 2);
  assert.equal(w.mgr.waitState("stub-g"), undefined, "no longer waiting");
});

test("keep-warm: an idle gang stops whole, once", async (t) => {
  const { w } = gangWorld(t, 2, 1, 10);
  await w.tick();
  const [r0, r1] = gangRuns(w);
  assert.ok(r0 && r1);
  w.activity.activity.set(r0.id, { busy: true, lastActiveAt: w.clock.now });
  w.activity.set("stub-g", 0, 1);
  await w.tick(60_000);
  assert.deepEqual(stopsOf(w), [], "busy: the gang stays");
  w.activity.activity.set(r0.id, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-g", 0);
  await w.tick(5_000);
  assert.deepEqual(stopsOf(w), [], "not idle long enough yet");
  await w.tick(6_000);
  assert.deepEqual(stopsOf(w).sort(), [r0.id, r1.id].sort());
  assert.equal(w.mgr.activeContainers("stub-g"), 0);
  assert.deepEqual(w.planner.list(), []);
});

test("pickVni: never one a live gang uses", () => {
  const seq = [5000, 5000, 6000];
  assert.equal(
    pickVni(new Set([5000]), () => seq.shift() as number),
    6000,
  );
  const v = pickVni(new Set());
  assert.ok(Number.isInteger(v) && v >= MIN_GANG_VNI && v <= MAX_GANG_VNI);
});

test("GPUs per member: each rank asks its own agent for the stub's GPUs", async (t) => {
  const w = world();
  t.after(() => w.mgr.stop());
  const gpu = (host: string) => capacity(8, 64, [{ type: "H100", uuid: `GPU-${host}` }]);
  w.addAgent("agent-a", gpu("a"), { nodeAddress: "10.0.0.1" });
  w.addAgent("agent-cpu", capacity(8, 64), { nodeAddress: "10.0.0.2" });
  w.addAgent("agent-b", gpu("b"), { nodeAddress: "10.0.0.3" });
  w.stubs.set("stub-g", stubRecord("stub-g", { extra: { nodes: 2, gpu_types: ["H100"], gpu_count: 1 } }));
  w.activity.set("stub-g", 1);
  await w.tick();
  const runs = gangRuns(w);
  assert.deepEqual(
    runs.map((r) => [r.gang?.hosts, r.gpu?.count, r.gpu?.types]),
    [
      [["10.0.0.1", "10.0.0.3"], 1, ["H100"]],
      [["10.0.0.1", "10.0.0.3"], 1, ["H100"]],
    ],
  );
  assert.equal(w.agents.get("agent-cpu")?.runs.length, 0);
});

test("a gang member found on an agent (a coordinator restart) is known by its labels", async () => {
  const api = new FakeContainerApi({ agentId: "agent-a" });
  const req = runnerRequest(stubRecord("stub-g", { extra: { nodes: 2 } }), "ctr-1", undefined);
  applyGang(req, {
    id: "gang-ab12",
    vni: 7000,
    rank: 1,
    size: 2,
    hosts: ["10.0.0.1", "10.0.0.2"],
    subnet: DEFAULT_GANG_SUBNET,
    masterPort: GANG_MASTER_PORT,
  });
  const status = await api.runContainer(req);
  const empty = { cpuMillicores: 0, memoryBytes: 0, gpus: {} };
  const c = adoptedRecord(status, { agentId: "agent-a", ready: true, total: empty, free: empty }, 0);
  assert.deepEqual(c?.gang, { id: "gang-ab12", rank: 1, size: 2, vni: 7000 });
  // One of no gang has none.
  const plain = await api.runContainer(runnerRequest(stubRecord("stub-f"), "ctr-2", undefined));
  assert.equal(
    adoptedRecord(plain, { agentId: "agent-a", ready: true, total: empty, free: empty }, 0)?.gang,
    undefined,
  );
});
