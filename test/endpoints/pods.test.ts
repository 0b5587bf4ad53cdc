// Deployed pods: the deploy checks, the container they run (entrypoint, no
// runner, ports, egress; one kept with no demand, never idled out), and
// `/endpoint/...` as a plain proxy to the pod's first port with no task.

import assert from "node:assert/strict";
import { once } from "node:events";
import { connect } from "node:net";
import { after, describe, test } from "node:test";
import { runnerRequest } from "../../coordinator/containers/runner-request.ts";
import { checkDeployment } from "../../coordinator/deployments/check.ts";
import { DeploymentCache } from "../../coordinator/deployments/states.ts";
import { RunnerLabels, type StubConfig, type StubExtra } from "../../shared/tasks.ts";
import { capacity, stubRecord, world } from "../containers/fakes.ts";
import { readUntil } from "../proxy/harness.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { perSuite } from "../helpers/suite.ts";
import { startEndpointHarness } from "./harness.ts";
import { bearer } from "../helpers/auth.ts";

const podExtra = (over: Partial<StubExtra> = {}): StubExtra =>
  stubExtra({ entrypoint: ["python3", "-m", "http.server", "8080"], ports: [8080], ...over });

const deployInput = (extra: StubExtra, config: Partial<StubConfig> = {}) => ({
  name: "web",
  kind: "pod",
  config: stubConfig({ keep_warm_seconds: -1, authorized: false, ...config }),
  extra,
});

test("a pod deployment needs an entrypoint and a valid egress policy", () => {
  checkDeployment(deployInput(podExtra()));
  assert.throws(() => checkDeployment(deployInput(podExtra({ entrypoint: [] }))), /needs extra\.entrypoint/);
  assert.throws(
    () => checkDeployment(deployInput(podExtra({ block_network: true, allow_list: ["10.0.0.0/8"] }))),
    /cannot be combined/,
  );
  assert.throws(
    () => checkDeployment(deployInput(podExtra({ allow_list: ["not-a-cidr"] }))),
    /allow_list entry/,
  );
});

test("a pod's container runs its entrypoint with no runner, its ports exposed and its egress policy", () => {
  const stub = stubRecord("stub-pod", {
    type: "pod/deployment",
    extra: podExtra({ ports: [8080, 9000], allow_list: ["10.1.2.3/8"], image_ref: "img:1" }),
  });
  const req = runnerRequest(stub, "ctr-pod1", undefined, { API_KEY: "s" });
  assert.deepEqual(req.args, ["python3", "-m", "http.server", "8080"]);
  assert.equal(req.runner, undefined);
  // The workspace bridge instead of a runner's (Output, Queue, Map in the pod).
  assert.deepEqual(req.bridge, { workspaceId: stub.workspaceId });
  assert.deepEqual(req.exposedPorts, [8080, 9000]);
  assert.deepEqual(req.egress, { mode: "allow", cidrs: ["10.0.0.0/8"] });
  assert.equal(req.image, "img:1");
  assert.deepEqual(req.env, { API_KEY: "s" });
  assert.equal(req.labels?.[RunnerLabels.stubId], "stub-pod");
  assert.deepEqual(
    runnerRequest(
      stubRecord("s2", { type: "pod/deployment", extra: podExtra({ block_network: true }) }),
      "c",
      undefined,
    ).egress,
    {
      mode: "block",
    },
  );
});

test("a deployed pod keeps one container with no demand and never idles it out (keep_warm_seconds -1)", async () => {
  const cache = new DeploymentCache();
  const at = new Date(0).toISOString();
  const extra = podExtra();
  cache.put({
    id: "dep-pod",
    workspaceId: "ws-1",
    name: "web",
    version: 1,
    kind: "pod",
    stubId: "stub-pod",
    active: true,
    serve: false,
    lastRequestAt: null,
    startedAt: at,
    createdAt: at,
    updatedAt: at,
    config: stubConfig({ keep_warm_seconds: -1 }),
    extra,
  });
  assert.deepEqual(cache.of("stub-pod"), { active: true, minContainers: 1 });
  const w = world({ deployments: cache });
  const a = w.addAgent("agent-a", capacity(8, 32));
  w.stubs.set(
    "stub-pod",
    stubRecord("stub-pod", { type: "pod/deployment", config: { keep_warm_seconds: -1 }, extra }),
  );
  await w.tick();
  assert.equal(a.runs.length, 1);
  assert.deepEqual(a.runs[0]?.args, extra.entrypoint);
  await w.tick(3_600_000);
  await w.tick(3_600_000);
  assert.equal(a.count("stopContainer"), 0);
  assert.equal(w.mgr.activeContainers("stub-pod"), 1);
});

describe("a pod deployment's URL (fake containers over local HTTP)", () => {
  const e = perSuite((suite) => startEndpointHarness(suite));

  test("authorized=False: plain HTTP to the first port by id without a token, no task recorded", async () => {
    const d = await e.deploy("web", "pod", { config: { authorized: false }, extra: podExtra() });
    const runner = await e.addContainer(d.stub.id, "ctr-pod-a");
    const res = await fetch(`${e.base}/endpoint/id/${d.deployment.id}/hello/there?x=1`, {
      method: "PUT",
      body: "raw bytes",
      headers: { authorization: "Bearer the-app-s-own" },
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-task-id"), null, "a pod request is no task");
    assert.equal(await res.text(), "PUT /hello/there?x=1 raw bytes");
    const seen = runner.seen.at(-1);
    assert.equal(seen?.headers["x-task-id"], undefined);
    assert.equal(seen?.headers.authorization, "Bearer the-app-s-own", "not berth's token: passed on");
    assert.equal(seen?.headers["x-forwarded-prefix"], `/endpoint/id/${d.deployment.id}`);
    assert.equal(e.deployments.requests.get(d.deployment.id), 1);
    // By name needs the workspace's token (names are per workspace); it is not passed on.
    const named = await fetch(`${e.base}/endpoint/web/p`, {
      headers: bearer(e.token),
    });
    assert.equal(named.status, 200);
    assert.equal(await named.text(), "GET /p ");
    assert.equal(runner.seen.at(-1)?.headers.authorization, undefined);
  });

  test("authorized=True: by id without a token is 401, another workspace's 404, the workspace's passes", async () => {
    const d = await e.deploy("private-pod", "pod", { config: { authorized: true }, extra: podExtra() });
    await e.addContainer(d.stub.id, "ctr-pod-b");
    const url = `${e.base}/endpoint/id/${d.deployment.id}/`;
    assert.equal((await fetch(url)).status, 401);
    assert.equal((await fetch(url, { headers: bearer(e.otherToken) })).status, 404);
    const ok = await fetch(url, { headers: bearer(e.token) });
    assert.equal(ok.status, 200);
    await ok.text();
  });

  test("a request waits while the pod starts; a pod without ports is 404 naming why", async () => {
    const d = await e.deploy("late", "pod", { config: { authorized: false }, extra: podExtra() });
    const pending = fetch(`${e.base}/endpoint/id/${d.deployment.id}/late`);
    // Not answered while no container runs: it is still waiting when the container comes.
    const raced = await Promise.race([
      pending.then(() => "answered"),
      new Promise((r) => setImmediate(() => r("waiting"))),
    ]);
    assert.equal(raced, "waiting");
    await e.addContainer(d.stub.id, "ctr-pod-late");
    const res = await pending;
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "GET /late ");

    const bare = await e.deploy("bare", "pod", {
      config: { authorized: false },
      extra: podExtra({ ports: [] }),
    });
    const r404 = await fetch(`${e.base}/endpoint/id/${bare.deployment.id}/`);
    assert.equal(r404.status, 404);
    assert.match(((await r404.json()) as { error: { message: string } }).error.message, /exposes no port/);
  });

  test("websockets to a pod are piped to its port, with no task", async () => {
    const d = await e.deploy("wsp", "pod", { config: { authorized: false }, extra: podExtra() });
    const runner = await e.addContainer(d.stub.id, "ctr-pod-ws");
    const u = new URL(e.base);
    const s = connect(Number(u.port), u.hostname);
    after(() => s.destroy());
    await once(s, "connect");
    s.write(
      `GET /endpoint/id/${d.deployment.id}/chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n`,
    );
    const head = await readUntil(s, "\r\n\r\n");
    assert.match(head, /^HTTP\/1\.1 101 /);
    assert.doesNotMatch(head, /x-task-id/i);
    s.write("hi");
    assert.match(await readUntil(s, "echo:hi"), /echo:hi$/);
    assert.equal(runner.seen.at(-1)?.url, "/chat");
  });
});
