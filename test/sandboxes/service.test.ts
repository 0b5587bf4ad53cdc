// SandboxService logic over a real SQLite store and fake agents: placement
// and the container request, refusals before anything starts, terminate,
// the TTL, exits, network, ports, processes and snapshots.

import assert from "node:assert/strict";
import { test } from "node:test";
import { BerthError } from "../../shared/errors.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { KEEP_ALIVE_ARGS, SandboxLabels } from "../../coordinator/sandboxes/request.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { sandboxWorld } from "./fakes.ts";

const code = (c: string) => (e: unknown) => e instanceof BerthError && e.code === c;

test("create places one container with the stub's resources, ports, egress and labels, and records it", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const stub = await w.stub("sb", "sandbox", {
    cpu_millicores: 500,
    ports: [8000, 9000],
    allow_list: ["10.1.2.3/8"],
    env: { GREETING: "hi" },
  });
  const v = await w.svc.create(w.ws, stub.id);
  assert.match(v.sandboxId, /^ctr-/);
  assert.equal(v.status, "running");
  assert.equal(v.ttlSeconds, 600);
  assert.equal(v.expiresAt, new Date(w.clock.now + 600_000).toISOString());
  assert.deepEqual(v.urls, {
    8000: `https://berth.example/port/${v.sandboxId}/8000/`,
    9000: `https://berth.example/port/${v.sandboxId}/9000/`,
  });
  assert.deepEqual(v.network, { block_network: false, allow_list: ["10.0.0.0/8"] });
  const [req] = a.runs;
  assert.ok(req);
  assert.equal(req.id, v.sandboxId);
  assert.deepEqual(req.args, KEEP_ALIVE_ARGS);
  assert.equal(req.cpu, 0.5);
  assert.equal(req.memoryBytes, 128 * 1024 * 1024);
  assert.deepEqual(req.exposedPorts, [8000, 9000]);
  assert.deepEqual(req.egress, { mode: "allow", cidrs: ["10.0.0.0/8"] });
  assert.deepEqual(req.env, { GREETING: "hi" });
  assert.equal(req.runner, undefined);
  // Not a managed runner container: the container manager leaves it alone.
  assert.equal(req.labels?.[RunnerLabels.managed], undefined);
  assert.equal(req.labels?.[SandboxLabels.sandbox], "1");
  assert.equal(req.labels?.[SandboxLabels.kind], "sandbox");
  assert.equal(req.labels?.[RunnerLabels.workspaceId], w.ws);
  assert.equal((await w.store.sandboxes.get(v.sandboxId))?.agentId, "agent-a");
  assert.deepEqual(
    w.svc.reservations().map((r) => [r.agentId, r.cpuMillicores]),
    [["agent-a", 500]],
  );
});

test("bad input is refused before anything starts; another workspace's stub and sandbox are not found", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const both = await w.stub("both", "sandbox", { block_network: true, allow_list: ["10.0.0.0/8"] });
  await assert.rejects(w.svc.create(w.ws, both.id), /cannot be combined/);
  const eleven = await w.stub("eleven", "sandbox", {
    allow_list: Array.from({ length: 11 }, (_, i) => `10.${i}.0.0/16`),
  });
  await assert.rejects(w.svc.create(w.ws, eleven.id), /11 entries/);
  const notCidr = await w.stub("notcidr", "sandbox", { allow_list: ["example.com"] });
  await assert.rejects(w.svc.create(w.ws, notCidr.id), /not in CIDR notation/);
  const fn = await w.stub("fn", "function");
  await assert.rejects(w.svc.create(w.ws, fn.id), /type sandbox or pod/);
  const pod = await w.stub("pod", "pod");
  await assert.rejects(w.svc.create(w.ws, pod.id, { expect: "pod" }), /needs an entrypoint/);
  // A gang of hosts is a deployed pod's (the container manager starts gangs), never one started here.
  const gang = await w.stub("gang", "pod", { entrypoint: ["python3", "train.py"], nodes: 2 });
  await assert.rejects(
    w.svc.create(w.ws, gang.id, { expect: "pod" }),
    /asks for a gang of 2 hosts \(nodes=2\): deploy it; POST \/api\/v1\/gateway\/pods starts one container/,
  );
  assert.equal(a.runs.length, 0);
  await assert.rejects(w.svc.create(w.otherWs, fn.id), code("not_found"));

  const ok = await w.svc.create(w.ws, (await w.stub("ok", "sandbox")).id);
  await assert.rejects(w.svc.get(w.otherWs, ok.sandboxId), code("not_found"));
  await assert.rejects(w.svc.terminate(w.otherWs, ok.sandboxId), code("not_found"));
  await assert.rejects(w.svc.get(w.ws, "ctr-nope"), code("not_found"));
});

test("never room: unplaceable naming what no agent has; a failed start leaves a terminated record and frees the room; full: resource_exhausted", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a", 1);
  const big = await w.stub("big", "sandbox", { cpu_millicores: 2000 });
  await assert.rejects(
    w.svc.create(w.ws, big.id),
    (e) => code("unplaceable")(e) && /cpu=2/.test(String(e)) && /largest agent has cpu=1/.test(String(e)),
  );
  const small = await w.stub("small", "sandbox", { cpu_millicores: 1000 });
  a.failRun.push(new BerthError("unavailable", "image pull failed"));
  await assert.rejects(w.svc.create(w.ws, small.id), /image pull failed/);
  assert.deepEqual(w.svc.reservations(), []);
  const [rec] = await w.store.sandboxes.list(w.ws);
  assert.equal(rec?.status, "terminated");
  assert.match(rec?.terminatedReason ?? "", /start failed: image pull failed/);
  assert.equal(a.failRun.length, 0, "the one failure was used");
  await w.svc.create(w.ws, small.id);
  // The one core is taken now.
  await assert.rejects(w.svc.create(w.ws, small.id), code("resource_exhausted"));
});

test("terminate stops and removes the container once; afterwards every call is sandbox_terminated", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const v = await w.svc.create(w.ws, (await w.stub("sb", "sandbox")).id);
  assert.equal(await w.svc.terminate(w.ws, v.sandboxId), true);
  assert.equal(a.containers.size, 0);
  assert.deepEqual(w.svc.reservations(), []);
  await assert.rejects(w.svc.terminate(w.ws, v.sandboxId), code("sandbox_terminated"));
  await assert.rejects(w.svc.exec(w.ws, v.sandboxId, { args: ["true"] }), code("sandbox_terminated"));
  await assert.rejects(w.svc.urls(w.ws, v.sandboxId), code("sandbox_terminated"));
  const after = await w.svc.get(w.ws, v.sandboxId);
  assert.equal(after.status, "terminated");
  assert.equal(after.terminatedReason, "terminated by request");
});

test("workspace limits: a sandbox past max_containers or max_cpu is refused with limit_exceeded; a terminated one frees its share", async (t) => {
  const limits = { maxContainers: 2, maxCpuMillicores: 1500, maxMemoryMb: null, maxGpus: null };
  const w = await sandboxWorld(t, { limits: async () => limits });
  w.addAgent("agent-a", 16);
  const stub = await w.stub("sb", "sandbox", { cpu_millicores: 1000 });
  const first = await w.svc.create(w.ws, stub.id);
  await assert.rejects(w.svc.create(w.ws, stub.id), (e: unknown) => {
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "limit_exceeded");
    assert.match(e.message, /max_cpu_millicores/);
    return true;
  });
  assert.equal(w.svc.usage(w.ws).containers, 1);
  assert.equal(w.svc.usage(w.ws).cpuMillicores, 1000);
  assert.equal(w.svc.usage(w.otherWs).containers, 0);
  await w.svc.terminate(w.ws, first.sandboxId);
  assert.equal(w.svc.usage(w.ws).containers, 0);
  const small = await w.stub("small", "sandbox", { cpu_millicores: 500 });
  await w.svc.create(w.ws, small.id);
  await w.svc.create(w.ws, small.id);
  await assert.rejects(w.svc.create(w.ws, small.id), /max_containers/);
});

test("monthly budgets: a create the budget check refuses places nothing; the check is told whether the stub asks for GPUs", async (t) => {
  const asked: { ws: string; gpus: boolean }[] = [];
  const w = await sandboxWorld(t, {
    budgets: async (ws, work) => {
      asked.push({ ws, gpus: work.gpus });
      if (work.gpus)
        throw new BerthError("limit_exceeded", "the workspace used 9 of its 8 GPU-hours this month", {
          limit: "gpu_hours_per_month",
        });
    },
  });
  const a = w.addAgent("agent-a", 16);
  const cpu = await w.stub("cpu", "sandbox");
  await w.svc.create(w.ws, cpu.id);
  assert.deepEqual(asked, [{ ws: w.ws, gpus: false }]);
  const gpu = await w.stub("gpu", "sandbox", { gpu_types: ["A100"], gpu_count: 1 });
  await assert.rejects(w.svc.create(w.ws, gpu.id), (e: unknown) => {
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "limit_exceeded");
    assert.equal(e.details?.limit, "gpu_hours_per_month");
    return true;
  });
  assert.equal(asked.at(-1)?.gpus, true);
  assert.equal(w.svc.reservations().length, 1, "only the CPU sandbox holds room");
  assert.equal(a.containers.size, 1);
});

test("terminate answers true when the stopped container's exit event is handled before the stop returns", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const v = await w.svc.create(w.ws, (await w.stub("sb", "sandbox")).id);
  a.onStop = async (id) => {
    a.onStop = undefined;
    w.emit({
      agentId: "agent-a",
      containerId: id,
      type: "exit",
      exitCode: 0,
      labels: { [SandboxLabels.sandbox]: "1" },
    });
    // The event's handling (a store read and write) runs to its end here, before the stop answers.
    await new Promise((r) => setTimeout(r, 50));
  };
  assert.equal(await w.svc.terminate(w.ws, v.sandboxId), true);
  const after = await w.svc.get(w.ws, v.sandboxId);
  assert.equal(after.status, "terminated");
  assert.equal(after.terminatedReason, "terminated by request");
});

test("TTL: an idle sandbox ends after ttl_seconds; activity and running processes keep it; -1 keeps it forever", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const short = await w.svc.create(w.ws, (await w.stub("short", "sandbox", { ttl_seconds: 60 })).id);
  const forever = await w.svc.create(w.ws, (await w.stub("forever", "sandbox")).id);
  assert.equal(await w.svc.setTtl(w.ws, forever.sandboxId, -1), null);
  const busy = await w.svc.create(w.ws, (await w.stub("busy", "sandbox", { ttl_seconds: 60 })).id);
  await w.svc.exec(w.ws, busy.sandboxId, { args: ["sleep", "1000"] });

  w.clock.now += 50_000;
  w.svc.touch(short.sandboxId); // a request through its port URL
  await w.svc.sweep();
  w.clock.now += 50_000;
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, short.sandboxId)).status, "running");

  w.clock.now += 61_000;
  await w.svc.sweep();
  const ended = await w.svc.get(w.ws, short.sandboxId);
  assert.equal(ended.status, "terminated");
  assert.match(ended.terminatedReason ?? "", /idle for more than 60 s/);
  assert.equal(a.containers.has(short.sandboxId), false);

  w.clock.now += 10 * 3_600_000;
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, forever.sandboxId)).status, "running");
  assert.equal((await w.svc.get(w.ws, busy.sandboxId)).status, "running");

  // The process ends; a TTL later the sandbox goes too.
  a.execs[0]?.finish(0);
  await w.svc.wait(w.ws, busy.sandboxId, 1);
  w.clock.now += 61_000;
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, busy.sandboxId)).status, "terminated");
  await assert.rejects(w.svc.setTtl(w.ws, forever.sandboxId, 0), code("invalid_request"));
});

test("TTL: the sweep asks the sandbox's agent for running processes; one that does not answer is asked again, not read as idle", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const v = await w.svc.create(w.ws, (await w.stub("busy", "sandbox", { ttl_seconds: 60 })).id);
  await w.svc.exec(w.ws, v.sandboxId, { args: ["sleep", "1000"] });
  const asked = a.count("listProcesses");
  w.clock.now += 61_000;
  a.failWith = new BerthError("unavailable", "agent agent-a is unreachable");
  await w.svc.sweep();
  a.failWith = undefined;
  assert.equal(a.count("listProcesses"), asked + 1, "the expired sandbox's agent was asked");
  assert.equal((await w.svc.get(w.ws, v.sandboxId)).status, "running");
  // It answers now: a running process is activity, the TTL starts again.
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, v.sandboxId)).status, "running");
  a.execs[0]?.finish(0);
  w.clock.now += 61_000;
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, v.sandboxId)).status, "terminated");
});

test("a container that exits on its own (event or agent listing) terminates its sandbox", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const pod = await w.svc.create(
    w.ws,
    (await w.stub("pod", "pod", { entrypoint: ["python3", "-m", "http.server"] })).id,
    {
      expect: "pod",
    },
  );
  assert.deepEqual(a.runs[0]?.args, ["python3", "-m", "http.server"]);
  assert.equal(pod.ttlSeconds, -1);
  w.emit({
    agentId: "agent-a",
    containerId: pod.sandboxId,
    type: "exit",
    exitCode: 3,
    labels: { [SandboxLabels.sandbox]: "1" },
  });
  await w.svc.close(); // waits for the event's work
  const v = await w.svc.get(w.ws, pod.sandboxId);
  assert.equal(v.status, "terminated");
  assert.match(v.terminatedReason ?? "", /exited \(code 3\)/);
  assert.equal(a.containers.has(pod.sandboxId), false);

  // Missed events: the periodic look at the agent finds the stopped container.
  const sb = await w.svc.create(w.ws, (await w.stub("sb", "sandbox")).id);
  const c = a.containers.get(sb.sandboxId);
  assert.ok(c);
  c.state = "stopped";
  c.exitCode = 0;
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, sb.sandboxId)).status, "terminated");
  // A container with no record, old enough, is removed; a record whose container vanished ends.
  const gone = await w.svc.create(w.ws, (await w.stub("gone", "sandbox")).id);
  a.containers.delete(gone.sandboxId);
  a.containers.set("ctr-orphan", {
    ...c,
    id: "ctr-orphan",
    state: "running",
    createdAt: Date.now() - 600_000,
  });
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, gone.sandboxId)).status, "terminated");
  assert.equal(a.containers.has("ctr-orphan"), false);
});

test("network changes go to the agent and the record; ports given at creation or exposed later get URLs", async (t) => {
  const w = await sandboxWorld(t, { endpointDomain: "ports.example" });
  const a = w.addAgent("agent-a");
  const v = await w.svc.create(w.ws, (await w.stub("sb", "sandbox", { ports: [8000] })).id);
  assert.deepEqual(await w.svc.updateNetwork(w.ws, v.sandboxId, { block_network: true }), {
    block_network: true,
    allow_list: null,
  });
  await assert.rejects(
    w.svc.updateNetwork(w.ws, v.sandboxId, { block_network: true, allow_list: ["10.0.0.0/8"] }),
    code("invalid_request"),
  );
  assert.deepEqual(await w.svc.updateNetwork(w.ws, v.sandboxId, { block_network: false, allow_list: [] }), {
    block_network: false,
    allow_list: null,
  });
  assert.deepEqual(
    a.policies.map(([, p]) => p.mode),
    ["block", "open"],
  );
  assert.equal((await w.svc.get(w.ws, v.sandboxId)).network.block_network, false);

  assert.deepEqual(await w.svc.exposePort(w.ws, v.sandboxId, 8000), {
    port: 8000,
    url: `https://${v.sandboxId}-8000.ports.example/`,
  });
  await assert.rejects(w.svc.exposePort(w.ws, v.sandboxId, 9000), /was not exposed when sandbox/);
  a.withExposePort();
  assert.equal((await w.svc.exposePort(w.ws, v.sandboxId, 9000)).port, 9000);
  assert.deepEqual(Object.keys(await w.svc.urls(w.ws, v.sandboxId)), ["8000", "9000"]);
});

test("processes: pids per sandbox, output kept per stream, stdin, kill, wait with a timeout, unknown pid", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const v = await w.svc.create(w.ws, (await w.stub("sb", "sandbox")).id);
  const p1 = await w.svc.exec(w.ws, v.sandboxId, { args: ["python3", "-c", "print(1+1)"], cwd: "/work" });
  const p2 = await w.svc.exec(w.ws, v.sandboxId, { args: ["cat"] });
  assert.deepEqual([p1.pid, p2.pid], [1, 2]);
  const [e1, e2] = a.execs;
  assert.ok(e1 && e2);
  assert.equal(e1.req.cwd, "/work");
  e1.write("stdout", "2\n");
  e1.write("stderr", "warn\n");
  e1.finish(0);
  const s1 = await w.svc.wait(w.ws, v.sandboxId, 1);
  const out = async (stream: "stdout" | "stderr" | "combined") =>
    Buffer.from((await w.svc.readOutput(w.ws, v.sandboxId, 1, stream, 0)).data).toString();
  assert.equal(await out("stdout"), "2\n");
  assert.equal(await out("stderr"), "warn\n");
  assert.equal(await out("combined"), "2\nwarn\n");
  assert.deepEqual([s1.exitCode, s1.status], [0, "exited"]);

  const body = async function* () {
    yield Buffer.from("hello");
  };
  assert.equal(await w.svc.writeStdin(w.ws, v.sandboxId, p2.pid, body(), true), 5);
  assert.equal(Buffer.concat(e2.stdin).toString(), "hello");
  assert.equal(e2.stdinClosed, true);
  const waited = await w.svc.wait(w.ws, v.sandboxId, p2.pid, { timeoutMs: 10 });
  assert.deepEqual([waited.exitCode, waited.status], [-1, "running"]);
  await w.svc.kill(w.ws, v.sandboxId, p2.pid, "SIGKILL");
  const s2 = await w.svc.wait(w.ws, v.sandboxId, p2.pid);
  assert.deepEqual([s2.exitCode, s2.status], [137, "killed"]);
  await assert.rejects(w.svc.writeStdin(w.ws, v.sandboxId, p2.pid, body(), false), /has ended/);
  assert.deepEqual(
    (await w.svc.listProcesses(w.ws, v.sandboxId)).map((p) => p.pid),
    [1, 2],
  );
  await assert.rejects(w.svc.process(w.ws, v.sandboxId, 3), code("process_not_found"));
  await assert.rejects(w.svc.exec(w.ws, v.sandboxId, { args: [] }), code("invalid_request"));
  await assert.rejects(w.svc.process(w.otherWs, v.sandboxId, 1), code("not_found"));
});

test("snapshots: a filesystem image runs on the agent holding it; memory snapshots restore there; checkpoint_unavailable passes through", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const b = w.addAgent("agent-b", 64); // emptier: placement would pick it
  const src = await w.svc.create(w.ws, (await w.stub("src", "sandbox", { ports: [8000] })).id);
  const holder = src.agentId === "agent-a" ? a : b;
  const imageId = await w.svc.snapshotFilesystem(w.ws, src.sandboxId);
  assert.match(imageId, /^img-/);
  assert.deepEqual(holder.commits, [[src.sandboxId, `berth-snapshots/${imageId}:latest`]]);
  // Image.from_id(image_id): the stub's image_ref is the img- id.
  const fromImage = await w.svc.create(w.ws, (await w.stub("from", "sandbox", { image_ref: imageId })).id);
  assert.equal(fromImage.agentId, holder.agentId);
  assert.equal(holder.runs.at(-1)?.image, `berth-snapshots/${imageId}:latest`);
  await assert.rejects(w.svc.create(w.otherWs, "x"), code("not_found"));
  const foreign = await w.store.stubs.upsert(w.otherWs, {
    name: "f",
    type: "sandbox",
    config: stubConfig({ handler: "" }),
    extra: stubExtra({ image_ref: imageId }),
    objectId: null,
  });
  await assert.rejects(
    w.svc.create(w.otherWs, foreign.stub.id),
    (e) => code("not_found")(e) && /img-/.test(String(e)),
  );

  const snapId = await w.svc.snapshotMemory(w.ws, src.sandboxId);
  assert.match(snapId, /^snap-/);
  const restored = await w.svc.createFromMemorySnapshot(w.ws, snapId);
  assert.equal(restored.agentId, holder.agentId);
  assert.equal(holder.restores[0]?.[0], snapId);
  assert.deepEqual(holder.restores[0]?.[1].exposedPorts, [8000]);
  assert.deepEqual(Object.keys(restored.urls), ["8000"]);
  await assert.rejects(w.svc.createFromMemorySnapshot(w.otherWs, snapId), code("not_found"));

  holder.checkpointError = new BerthError(
    "checkpoint_unavailable",
    "criu check: kernel lacks CONFIG_CHECKPOINT_RESTORE",
  );
  await assert.rejects(w.svc.snapshotMemory(w.ws, src.sandboxId), code("checkpoint_unavailable"));
});

test("a workspace opted out: its sandboxes and pods start without a user namespace and with the deny list", async (t) => {
  const none = { maxContainers: null, maxCpuMillicores: null, maxMemoryMb: null, maxGpus: null };
  let optedOut = true;
  const w = await sandboxWorld(t, {
    limits: async () =>
      optedOut
        ? { ...none, userNamespace: false, syscallFilter: "denylist" as const }
        : { ...none, userNamespace: true, syscallFilter: "allowlist" as const },
  });
  const a = w.addAgent("agent-a", 16);
  const stub = await w.stub("sb-legacy", "sandbox");
  const first = await w.svc.create(w.ws, stub.id);
  const run1 = a.runs.find((r) => r.id === first.sandboxId);
  assert.deepEqual([run1?.userNamespace, run1?.syscallFilter], [false, "denylist"]);
  const podStub = await w.stub("pod-legacy", "pod", { entrypoint: ["python3", "-m", "http.server"] });
  const pod = await w.svc.create(w.ws, podStub.id, { expect: "pod" });
  const podRun = a.runs.find((r) => r.id === pod.sandboxId);
  assert.deepEqual([podRun?.userNamespace, podRun?.syscallFilter], [false, "denylist"], "a pod as a sandbox");
  optedOut = false;
  const second = await w.svc.create(w.ws, stub.id);
  const run2 = a.runs.find((r) => r.id === second.sandboxId);
  assert.ok(run2);
  assert.equal("userNamespace" in run2, false, "the agent's default");
  assert.equal("syscallFilter" in run2, false, "the agent's default");
});

test("a workspace forced to gVisor: its sandboxes and pods start under gVisor whatever the stub asks", async (t) => {
  const none = { maxContainers: null, maxCpuMillicores: null, maxMemoryMb: null, maxGpus: null };
  let forced: "gvisor" | null = "gvisor";
  const w = await sandboxWorld(t, { limits: async () => ({ ...none, isolation: forced }) });
  const a = w.addAgent("agent-a", 16);
  const stub = await w.stub("sb", "sandbox");
  const first = await w.svc.create(w.ws, stub.id);
  assert.equal(a.runs.find((r) => r.id === first.sandboxId)?.isolation, "gvisor");
  forced = null;
  const second = await w.svc.create(w.ws, stub.id);
  assert.equal(
    a.runs.find((r) => r.id === second.sandboxId)?.isolation,
    undefined,
    "the stub's own choice again",
  );
});
