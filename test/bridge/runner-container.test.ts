// Runner containers end to end: a real ContainerHost (registry pull, runc,
// network) with the task bridge on real JetStream. The runner is a small
// Python script shipped in the code archive that speaks the bridge protocol
// over the mounted socket and calls the archive's handler.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ContainerHost } from "../../agent/host/index.ts";
import { ImageStore } from "../../agent/images/index.ts";
import type { RunContainerRequest } from "../../api/index.ts";
import { ContainerRuntime } from "../../agent/runtime/index.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import { waitFor } from "../../shared/net.ts";
import { RunnerLabels, type TaskEvent } from "../../shared/tasks.ts";
import { chunks, sha256Hex, tarGz } from "../code/tar-builder.ts";
import { needs } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { execAll, HOST_COMMANDS, hostTempDir, MiB } from "../host/harness.ts";
import { startTestNetwork, sweepAfter, Teardown, testNames } from "../network/helpers.ts";
import { eventsOf, publishTask, queueEmpty, startTaskNats } from "./helpers.ts";

const AGENT_ID = "agent-runner-e2e";
const STUB = "stub-e2e";

const APP_PY = "def square(x):\n    return x * x\n";

const FAKE_RUNNER_PY = `
import base64, http.client, json, os, socket, sys, time
import app

class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.socket_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(self.socket_path)
        self.sock = s

conn = UnixConnection(os.environ["BERTH_AGENT_SOCKET"])

def post(path, body):
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    raw = r.read()
    return r.status, (json.loads(raw) if raw else None)

assert os.getcwd() == "/mnt/code", os.getcwd()
while True:
    status, body = post("/v1/tasks/next", {})
    if status == 204:
        continue
    if status != 200:
        print("next answered", status, body, flush=True)
        time.sleep(0.2)
        continue
    task = body["task"]
    inp = json.loads(base64.b64decode(task["args"]))
    post("/v1/tasks/%s/output" % task["id"], {"stream": "stdout", "data": "attempt %d\\n" % task["attempt"]})
    if inp.get("alloc_mb"):
        hog = b"x" * (inp["alloc_mb"] << 20)
    if inp.get("sleep_on_attempt") == task["attempt"]:
        time.sleep(inp["sleep"])
    out = json.dumps(app.square(inp["x"]))
    post("/v1/tasks/%s/result" % task["id"], {
        "status": "COMPLETE",
        "result": base64.b64encode(out.encode()).decode(),
        "result_json": out,
    })
`;

const shape = (evs: TaskEvent[]) =>
  evs.map((e) => [
    e.type,
    e.type === "finished" ? e.status : e.type === "retry" ? e.reason.split(":")[0] : "",
    e.attempt,
  ]);
const payload = (o: object) => Buffer.from(JSON.stringify(o));

test("runner containers take tasks through the bridge", { timeout: 300_000 }, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "nats-server"] })) return;
  const down = new Teardown(t);
  const dir = hostTempDir(down, "berth-runner-");
  const runcRoot = join(dir, "containers", ".runc");
  const names = await testNames();
  sweepAfter(down, names);
  const { net } = await startTestNetwork(t, down, names, { dataDir: join(dir, "net") });
  const registry = await startTestRegistry(t);
  const imageRef = await pushTestImage(registry);
  const n = await startTaskNats(t);
  mkdirSync(join(dir, "allowed"));

  let host: ContainerHost | undefined;
  const runners = new TaskRunners({
    kill: async (id) => void (await host?.stopContainer(id, { graceMs: 500, remove: true })),
    worker: { pullWaitMs: 5_000 },
  });
  host = await ContainerHost.start({
    root: join(dir, "host"),
    images: new ImageStore({ root: join(dir, "images") }),
    network: net,
    runtime: (hooks) =>
      // A small disk per container: writes to the working directory count in it.
      new ContainerRuntime({
        root: join(dir, "containers"),
        pollIntervalMs: 100,
        diskBytes: 64 * MiB,
        ...hooks,
      }),
    capacity: { cpuCores: 2, memoryBytes: 4 * 1024 * MiB },
    allowedMountRoots: [join(dir, "allowed")],
    codeDir: join(dir, "code"),
    bridgeDir: join(dir, "bridge"),
    runners,
  });
  const h = host;
  down.defer(async () => {
    for (const c of await h.listContainers()) await h.stopContainer(c.id, { graceMs: 0, remove: true });
    await runners.stop();
    h.close();
    assert.deepEqual(await new Runc("runc", runcRoot).list(), [], "no runc container may be left");
    assert.deepEqual(net.list(), [], "no network lease may be left");
    assert.deepEqual(mountsUnder(dir), [], "no mount may be left");
  });

  const archive = tarGz([
    { name: "app.py", data: APP_PY },
    { name: "fake_runner.py", data: FAKE_RUNNER_PY },
  ]);
  const sha = sha256Hex(archive);
  const runner = { stubId: STUB, workspaceId: "ws-e2e", stubType: "function", handler: "app:square" };
  const request = (): RunContainerRequest => ({
    image: imageRef,
    cpu: 0.25,
    memoryBytes: 128 * MiB,
    args: ["python3", "-u", "/mnt/code/fake_runner.py"],
    code: { sha256: sha },
    runner,
  });

  await t.test("refusals: code not put yet, no NATS yet", async () => {
    await assert.rejects(h.runContainer(request()), (e: Error & { code?: string }) => {
      assert.equal(e.code, "failed_precondition");
      assert.match(e.message, new RegExp(`code archive ${sha} is not on this agent: put the code first`));
      return true;
    });
    await h.putCode(sha, chunks(archive));
    assert.equal(await h.hasCode(sha), true);
    await assert.rejects(h.runContainer(request()), /not joined to a coordinator, or not connected to NATS/);
    assert.deepEqual(await h.listContainers(), []);
    await runners.attach(n.agent, AGENT_ID);
  });

  await t.test("a task completes in a runner container under gVisor (isolation gvisor)", async (tt) => {
    if (!needs(tt, { commands: ["runsc"] })) return;
    const c = await h.runContainer({ ...request(), isolation: "gvisor" });
    await publishTask(n, { stubId: STUB, taskId: "task-gvisor-1", payload: payload({ x: 5 }) });
    const evs = await eventsOf(n, "task-gvisor-1", 2, 60_000);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["finished", "COMPLETE", 1],
    ]);
    const fin = evs[1] as Extract<TaskEvent, { type: "finished" }>;
    assert.equal(fin.resultJson, "25");
    assert.equal(fin.containerId, c.id);
    await queueEmpty(n);
    await h.stopContainer(c.id, { graceMs: 0, remove: true });
  });

  await t.test("a task completes in a runner container with the code, SDK and socket mounted", async () => {
    const c = await h.runContainer(request());
    assert.equal(c.labels[RunnerLabels.stubId], STUB);
    assert.equal(c.labels[RunnerLabels.workspaceId], "ws-e2e");
    await publishTask(n, { stubId: STUB, taskId: "task-e2e-1", payload: payload({ x: 7 }) });
    const evs = await eventsOf(n, "task-e2e-1", 2, 60_000);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["finished", "COMPLETE", 1],
    ]);
    const fin = evs[1] as Extract<TaskEvent, { type: "finished" }>;
    assert.equal(fin.resultJson, "49");
    assert.equal(fin.containerId, c.id);
    await queueEmpty(n);
    const env = await execAll(
      await h.exec(c.id, {
        args: [
          "python3",
          "-c",
          "import os,json;print(json.dumps({k:v for k,v in os.environ.items() if k.startswith('BERTH_') or k=='PYTHONPATH'}))",
        ],
      }),
    );
    assert.deepEqual(JSON.parse(env.stdout), {
      BERTH_REMOTE: "1",
      BERTH_CONTAINER_ID: c.id,
      BERTH_STUB_ID: STUB,
      BERTH_STUB_TYPE: "function",
      BERTH_HANDLER: "app:square",
      BERTH_ON_START: "",
      BERTH_PYTHON_VERSION: "",
      BERTH_CALLBACK_URL: "",
      BERTH_RETRY_FOR: "[]",
      BERTH_WORKERS: "1",
      BERTH_AGENT_SOCKET: "/berth/run/agent.sock",
      PYTHONPATH: "/berth/sdk:/mnt/code",
    });
    const sdk = await execAll(
      await h.exec(c.id, {
        args: ["sh", "-c", "test -f /berth/sdk/berth/__init__.py && touch /berth/sdk/x"],
      }),
    );
    assert.notEqual(sdk.code, 0, "the SDK mount is read-only");
    assert.match(sdk.stderr, /Read-only file system/);
    await h.stopContainer(c.id, { graceMs: 0, remove: true });
    assert.equal(existsSync(join(dir, "bridge", c.id)), false, "the bridge dir goes with the container");
  });

  await t.test(
    "the working directory is each container's to write; the shared code stays as it was",
    async () => {
      const write = (id: string, script: string) =>
        h.exec(id, { args: ["python3", "-c", script], cwd: "/mnt/code" }).then(execAll);
      const a = await h.runContainer(request());
      const b = await h.runContainer(request());
      const wrote = await write(
        a.id,
        "open('out.txt','w').write('from a'); open('app.py','a').write('# changed'); print(open('out.txt').read())",
      );
      assert.deepEqual([wrote.code, wrote.stdout.trim()], [0, "from a"], wrote.stderr);
      const other = await write(
        b.id,
        "import os; print(os.path.exists('out.txt'), open('app.py').read().endswith('# changed'))",
      );
      assert.deepEqual([other.code, other.stdout.trim()], [0, "False False"], other.stderr);
      const tree = join(dir, "code", sha, "mnt", "code");
      assert.equal(existsSync(join(tree, "out.txt")), false, "nothing written reaches the shared tree");
      assert.equal(readFileSync(join(tree, "app.py"), "utf8"), APP_PY);
      // Its writes land on its own disk (64 MiB here): past that, ENOSPC, not the agent's disk filling up.
      const big = await write(a.id, "open('big.bin','wb').write(b'x' * (96 << 20))");
      assert.notEqual(big.code, 0, "a write past the container's disk quota fails");
      assert.match(big.stderr, /No space left on device/);
      for (const c of [a, b]) await h.stopContainer(c.id, { graceMs: 0, remove: true });
      assert.deepEqual(mountsUnder(dir), [], "no mount is left once they are removed");
      const fresh = await h.runContainer(request());
      const again = await write(fresh.id, "import os; print(os.path.exists('out.txt'))");
      assert.equal(again.stdout.trim(), "False");
      await h.stopContainer(fresh.id, { graceMs: 0, remove: true });
    },
  );

  await t.test("a runner killed mid-task: the task is retried and a new container completes it", async () => {
    const first = await h.runContainer(request());
    await publishTask(n, {
      stubId: STUB,
      taskId: "task-e2e-kill",
      maxRetries: 2,
      payload: payload({ x: 5, sleep_on_attempt: 1, sleep: 120 }),
    });
    await eventsOf(n, "task-e2e-kill", 1, 60_000);
    await h.stopContainer(first.id, { graceMs: 0 });
    const retried = await eventsOf(n, "task-e2e-kill", 2);
    assert.deepEqual(shape(retried), [
      ["started", "", 1],
      ["retry", "container_exited", 1],
    ]);
    await h.stopContainer(first.id, { remove: true });
    const second = await h.runContainer(request());
    const evs = await eventsOf(n, "task-e2e-kill", 4, 60_000);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["retry", "container_exited", 1],
      ["started", "", 2],
      ["finished", "COMPLETE", 2],
    ]);
    assert.equal(evs[3]!.containerId, second.id);
    assert.equal((evs[3] as Extract<TaskEvent, { type: "finished" }>).resultJson, "25");
    await queueEmpty(n);
    await h.stopContainer(second.id, { graceMs: 0, remove: true });
  });

  await t.test(
    "a runner killed for memory: the task's error names the limit and memory=; /dev/shm is sized to it",
    async () => {
      const c = await h.runContainer(request());
      // /dev/shm is as large as the memory limit (128 MiB here), not a fixed 64 MiB.
      const shm = await execAll(
        await h.exec(c.id, {
          args: ["python3", "-c", "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"],
        }),
      );
      assert.equal(shm.stdout.trim(), String(128 * MiB), shm.stderr);
      await publishTask(n, {
        stubId: STUB,
        taskId: "task-e2e-oom",
        payload: payload({ x: 1, alloc_mb: 300 }),
      });
      const evs = await eventsOf(n, "task-e2e-oom", 2, 60_000);
      assert.deepEqual(shape(evs), [
        ["started", "", 1],
        ["finished", "FAILED", 1],
      ]);
      const fin = evs[1] as Extract<TaskEvent, { type: "finished" }>;
      assert.equal(fin.reason, "oom_killed");
      assert.equal(fin.error?.type, "OutOfMemory");
      assert.match(
        fin.error?.message ?? "",
        /^the container ran out of memory \(exit code 137 on the last attempt\): killed for memory: the limit is 128 MiB; raise memory= /,
      );
      await queueEmpty(n);
      await h.stopContainer(c.id, { graceMs: 0, remove: true });
    },
  );

  await t.test("a task past its timeout ends TIMEOUT and its container is removed", async () => {
    const c = await h.runContainer(request());
    await publishTask(n, {
      stubId: STUB,
      taskId: "task-e2e-slow",
      timeoutS: 1,
      maxRetries: 2,
      payload: payload({ x: 2, sleep_on_attempt: 1, sleep: 120 }),
    });
    const evs = await eventsOf(n, "task-e2e-slow", 2, 60_000);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["finished", "TIMEOUT", 1],
    ]);
    await queueEmpty(n);
    await waitFor(async () => (await h.listContainers()).every((x) => x.id !== c.id) || undefined, {
      timeoutMs: 30_000,
      what: "the timed-out runner container's removal",
    });
    assert.equal(existsSync(join(dir, "bridge", c.id)), false);
  });
});
