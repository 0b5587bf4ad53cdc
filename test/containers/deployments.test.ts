// The container manager with deployments: baselines, the queue_depth
// autoscaler's clamp, keep-warm above the target, stopped deployments,
// config_version replacement, scaling events, the endpoint router's view of
// containers, and the request of a direct-served container.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  CONFIG_VERSION_LABEL,
  ENDPOINT_PORT,
  runnerRequest,
} from "../../coordinator/containers/runner-request.ts";
import type { ContainerManagerOptions, ScaleEvent, StubRecord } from "../../coordinator/containers/types.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { FakeDeployments, capacity, stubRecord, world } from "./fakes.ts";

const endpoint = (id: string, over: Parameters<typeof stubRecord>[1] = {}): StubRecord =>
  stubRecord(id, {
    type: "endpoint/deployment",
    ...over,
    config: {
      keep_warm_seconds: 10,
      autoscaler: { type: "queue_depth", max_containers: 5, tasks_per_container: 0 },
      ...over.config,
    },
  });

function deployedWorld(over: Partial<ContainerManagerOptions> = {}) {
  const deployments = new FakeDeployments();
  const events: ScaleEvent[] = [];
  const w = world({ deployments, onScale: (ev) => events.push(ev), ...over });
  const a = w.addAgent("agent-a", capacity(64, 256));
  const stops = () => a.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1] as string);
  return { w, a, deployments, events, stops };
}

const moves = (events: ScaleEvent[]) => events.map((e) => [e.from, e.to, e.reason]);

test("a baseline starts without any task and is kept with no demand", async () => {
  const { w, a, deployments, events } = deployedWorld();
  w.stubs.set("stub-ep", endpoint("stub-ep"));
  deployments.set("stub-ep", true, 2);
  await w.tick();
  assert.equal(a.runs.length, 2);
  await w.tick(3_600_000);
  await w.tick(3_600_000);
  assert.equal(a.count("stopContainer"), 0);
  assert.equal(w.mgr.activeContainers("stub-ep"), 2);
  assert.deepEqual(moves(events), [[0, 2, "min_containers"]], "one event, not one per reconcile");
  assert.deepEqual(
    { stubId: events[0]?.stubId, workspaceId: events[0]?.workspaceId, queueDepth: events[0]?.queueDepth },
    { stubId: "stub-ep", workspaceId: "ws-1", queueDepth: 0 },
  );
});

test("max_containers clamps: 50 waiting with max 3 places exactly 3", async () => {
  const { w, a, events, deployments } = deployedWorld();
  deployments.set("stub-q", true);
  w.stubs.set(
    "stub-q",
    stubRecord("stub-q", {
      type: "taskqueue/deployment",
      config: { autoscaler: { type: "queue_depth", max_containers: 3, tasks_per_container: 0 } },
    }),
  );
  w.activity.set("stub-q", 50);
  await w.tick();
  await w.tick(1000);
  assert.equal(a.runs.length, 3);
  assert.deepEqual(moves(events), [[0, 3, "queue depth: 50 waiting, 0 running"]]);
  assert.equal(events[0]?.queueDepth, 50);
});

test("tasks_per_container sets how many tasks make one container", async () => {
  const { w, a, deployments } = deployedWorld();
  deployments.set("stub-q", true);
  w.stubs.set(
    "stub-q",
    stubRecord("stub-q", {
      type: "taskqueue/deployment",
      config: { workers: 1, autoscaler: { type: "queue_depth", max_containers: 10, tasks_per_container: 5 } },
    }),
  );
  w.activity.set("stub-q", 12);
  await w.tick();
  assert.equal(a.runs.length, 3);
});

test("a deployment's stub whose record is gone drains like a stopped one", async () => {
  const { w, a, deployments, stops } = deployedWorld();
  w.stubs.set("stub-ep", endpoint("stub-ep"));
  deployments.set("stub-ep", true);
  w.activity.set("stub-ep", 1);
  await w.tick();
  assert.equal(a.runs.length, 1);
  w.activity.set("stub-ep", 0);
  deployments.states.delete("stub-ep");
  await w.tick(1000);
  assert.equal(stops().length, 1, "its idle container stops at once, not after keep_warm_seconds");
});

test("above the target, idle containers stop after keep_warm_seconds, never a busy one, never the baseline", async () => {
  const { w, deployments, events, stops } = deployedWorld();
  w.stubs.set("stub-ep", endpoint("stub-ep"));
  deployments.set("stub-ep", true, 1);
  w.activity.set("stub-ep", 3);
  await w.tick();
  const [c1, c2, c3] = w.mgr.list().map((c) => c.id) as [string, string, string];
  const t0 = w.clock.now;
  w.activity.activity.set(c1, { busy: true, lastActiveAt: t0 });
  w.activity.activity.set(c2, { busy: false, lastActiveAt: t0 + 1000 });
  w.activity.activity.set(c3, { busy: false, lastActiveAt: t0 });
  w.activity.set("stub-ep", 0, 1);
  await w.tick(9_000);
  assert.deepEqual(stops(), [], "not idle long enough yet");
  await w.tick(1_000);
  assert.deepEqual(stops(), [c3], "the longest idle first; c2 has 1 s to go");
  await w.tick(1_000);
  assert.deepEqual(stops(), [c3, c2]);
  // c1 finishes: it is the baseline now, kept however long it idles.
  w.activity.activity.set(c1, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-ep", 0);
  await w.tick(3_600_000);
  assert.deepEqual(stops(), [c3, c2]);
  assert.deepEqual(moves(events), [
    [0, 3, "queue depth: 3 waiting, 0 running"],
    [3, 2, "idle past keep_warm_seconds"],
    [2, 1, "idle past keep_warm_seconds"],
  ]);
});

test("a stopped deployment stops idle containers at once and busy ones when idle, and starts nothing", async () => {
  const { w, a, deployments, events, stops } = deployedWorld();
  w.stubs.set("stub-ep", endpoint("stub-ep", { config: { keep_warm_seconds: -1 } }));
  deployments.set("stub-ep", true, 0);
  w.activity.set("stub-ep", 2);
  await w.tick();
  const [busy, idle] = w.mgr.list().map((c) => c.id) as [string, string];
  w.activity.activity.set(busy, { busy: true, lastActiveAt: w.clock.now });
  w.activity.activity.set(idle, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-ep", 5, 1);
  deployments.set("stub-ep", false, 0);
  w.mgr.invalidateStub("stub-ep");
  await w.tick();
  assert.deepEqual(stops(), [idle], "keep_warm -1 does not hold a stopped deployment's container");
  assert.equal(a.runs.length, 2, "waiting tasks start nothing");
  w.activity.activity.set(busy, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-ep", 5, 0);
  await w.tick();
  assert.deepEqual(stops(), [idle, busy]);
  assert.equal(w.mgr.activeContainers("stub-ep"), 0);
  await w.tick(60_000);
  assert.equal(a.runs.length, 2);
  assert.deepEqual(moves(events), [
    [0, 2, "queue depth: 2 waiting, 0 running"],
    [2, 0, "deployment stopped"],
  ]);
});

test("a newer config_version replaces idle containers at once and busy ones when idle", async () => {
  // A long stub cache: only invalidateStub makes the change seen before it expires.
  const { w, a, deployments, events, stops } = deployedWorld({ stubCacheMs: 60_000 });
  w.stubs.set("stub-s", endpoint("stub-s", { type: "endpoint/serve" }));
  deployments.set("stub-s", true, 2);
  await w.tick();
  const [busy, idle] = w.mgr.list().map((c) => c.id) as [string, string];
  assert.equal(a.runs[0]?.labels?.[CONFIG_VERSION_LABEL], "1");
  w.activity.activity.set(busy, { busy: true, lastActiveAt: w.clock.now });
  w.activity.set("stub-s", 0, 1);
  w.stubs.set("stub-s", endpoint("stub-s", { type: "endpoint/serve", configVersion: 2 }));
  await w.tick(1000);
  assert.deepEqual(stops(), [], "the cached stub still says version 1");
  w.mgr.invalidateStub("stub-s");
  await w.tick();
  assert.deepEqual(stops(), [idle]);
  const fresh = a.runs.slice(2);
  assert.equal(fresh.length, 2, "two new containers for the baseline");
  assert.ok(fresh.every((r) => r.labels?.[CONFIG_VERSION_LABEL] === "2"));
  await w.tick(1000);
  assert.deepEqual(stops(), [idle], "the busy one keeps its request");
  w.activity.activity.set(busy, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-s", 0);
  await w.tick();
  assert.deepEqual(stops(), [idle, busy]);
  assert.equal(a.runs.length, 4);
  assert.equal(w.mgr.activeContainers("stub-s"), 2);
  assert.deepEqual(moves(events), [[0, 2, "min_containers"]], "a replacement is no change of target");
});

test("an adopted container of an older config_version is replaced", async () => {
  const { w, a, deployments, stops } = deployedWorld();
  w.stubs.set("stub-ep", endpoint("stub-ep"));
  deployments.set("stub-ep", true, 1);
  await w.tick();
  const [old] = w.mgr.list().map((c) => c.id) as [string];
  // A restarted coordinator finds it on the agent, while the stub moved on to version 3.
  await w.mgr.stop({ stopContainers: false });
  const w2 = deployedWorld();
  const back = w2.w.addAgent("agent-a", capacity(64, 256));
  for (const [id, s] of a.containers) back.containers.set(id, s);
  w2.w.stubs.set("stub-ep", endpoint("stub-ep", { configVersion: 3 }));
  w2.deployments.set("stub-ep", true, 1);
  await w2.w.tick();
  await w2.w.tick();
  assert.deepEqual(
    back.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1]),
    [old],
  );
  assert.equal(back.runs[0]?.labels?.[CONFIG_VERSION_LABEL], "3");
  assert.deepEqual(stops(), []);
});

test("containersOf and onContainersChange: running, stopping and gone are heard", async () => {
  const { w, deployments } = deployedWorld();
  w.stubs.set("stub-ep", endpoint("stub-ep"));
  deployments.set("stub-ep", true, 1);
  const heard: [string, string[]][] = [];
  const off = w.mgr.onContainersChange((stubId) =>
    heard.push([stubId, w.mgr.containersOf(stubId).map((c) => c.state)]),
  );
  await w.tick();
  const [c] = w.mgr.containersOf("stub-ep");
  assert.equal(c?.state, "running");
  assert.equal(c?.agentId, "agent-a");
  assert.deepEqual(w.mgr.containersOf("stub-other"), []);
  deployments.set("stub-ep", false);
  await w.tick();
  assert.deepEqual(heard, [
    ["stub-ep", ["running"]],
    ["stub-ep", ["stopping"]],
    ["stub-ep", []],
  ]);
  off();
  deployments.set("stub-ep", true, 1);
  await w.tick();
  assert.equal(heard.length, 3, "unsubscribed");
});

test("runnerRequest of an endpoint stub runs berth.runtime.http_runner on the exposed port, keeping the runner", () => {
  const stub = endpoint("stub-ep", { config: { workers: 2 }, extra: { concurrent_requests: 8 } });
  const req = runnerRequest(stub, "ctr-1", undefined);
  assert.equal(ENDPOINT_PORT, 8000);
  assert.deepEqual(req.args, [
    "python3",
    "-u",
    "-m",
    "berth.runtime.http_runner",
    "--port",
    "8000",
    "--concurrent-requests",
    "8",
  ]);
  assert.deepEqual(req.exposedPorts, [8000]);
  assert.equal(req.runner?.stubType, "endpoint/deployment");
  assert.equal(req.runner?.workers, 2);
  assert.equal(req.labels?.[RunnerLabels.stubId], "stub-ep");
  // Queued kinds keep the runner's own program.
  const queued = runnerRequest(stubRecord("stub-q", { type: "taskqueue/deployment" }), "ctr-2", undefined);
  assert.deepEqual(queued.args, []);
  assert.equal(queued.exposedPorts, undefined);
});

test("a baseline container does not give its room to another stub's waiting tasks", async () => {
  const deployments = new FakeDeployments();
  const w = world({ deployments });
  const a = w.addAgent("agent-a", capacity(2, 64));
  w.stubs.set("stub-ep", endpoint("stub-ep", { extra: { cpu_millicores: 2000 } }));
  w.stubs.set("stub-fn", stubRecord("stub-fn", { extra: { cpu_millicores: 2000 } }));
  deployments.set("stub-ep", true, 1);
  await w.tick();
  w.activity.set("stub-fn", 1);
  await w.tick(1000);
  await w.tick(1000);
  assert.equal(a.count("stopContainer"), 0);
  assert.equal(w.mgr.activeContainers("stub-ep"), 1);
  assert.equal(w.mgr.activeContainers("stub-fn"), 0, "it waits for room");
});
