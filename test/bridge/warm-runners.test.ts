// Pre-warmed runners on a real ContainerHost (runc, network, JetStream task
// bridge, the SDK's own runner): one is given to a stub of workspace A and
// runs its function with A's code, secret, limits and egress; it never comes
// back to the pool, and a stub of workspace B gets another container.

import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { test } from "node:test";
import { ContainerHost } from "../../agent/host/index.ts";
import { ImageStore } from "../../agent/images/index.ts";
import { ContainerRuntime, readCpuLimit, readPidsLimit } from "../../agent/runtime/index.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import type { RunContainerRequest } from "../../api/index.ts";
import { waitFor } from "../../shared/net.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { RunnerLabels, type TaskEvent } from "../../shared/tasks.ts";
import { chunks, sha256Hex, tarGz } from "../code/tar-builder.ts";
import { needs } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { execAll, HOST_COMMANDS, hostTempDir, MiB } from "../host/harness.ts";
import {
  createOutside,
  listenIn,
  randomPort,
  startTestNetwork,
  sweepAfter,
  Teardown,
  testNames,
} from "../network/helpers.ts";
import { eventsOf, publishTask, queueEmpty, startTaskNats } from "./helpers.ts";

// What the stub's function sees of its container: where it runs, its
// environment, its cgroup limits (v1 or v2 files), and whether it reaches a
// listener outside.
const execFileP = promisify(execFile);

const APP_PY = `
import os, socket

def _read(*paths):
    for p in paths:
        try:
            return open(p).read().strip()
        except OSError:
            pass
    return None

def probe(host, port):
    try:
        s = socket.create_connection((host, int(port)), timeout=3)
        reached = "OK " + s.recv(64).decode().strip()
        s.close()
    except OSError as e:
        reached = "FAIL " + type(e).__name__
    return {
        "cwd": os.getcwd(),
        "secret": os.environ.get("MY_SECRET"),
        "container": os.environ.get("BERTH_CONTAINER_ID"),
        "stub": os.environ.get("BERTH_STUB_ID"),
        "memory": _read("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"),
        "pids": _read("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"),
        "reached": reached,
    }
`;

test("pre-warmed runners: given once, with the stub's code, secrets, limits and egress", {
  timeout: 400_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "nats-server"] })) return;
  const down = new Teardown(t);
  const dir = hostTempDir(down, "berth-warm-");
  const runcRoot = join(dir, "containers", ".runc");
  const names = await testNames();
  sweepAfter(down, names);
  const { net } = await startTestNetwork(t, down, names, { dataDir: join(dir, "net") });
  const registry = await startTestRegistry(t);
  const imageRef = await pushTestImage(registry);
  const n = await startTaskNats(t);
  mkdirSync(join(dir, "allowed"));
  const outside = await createOutside(down, names);
  const port = randomPort();
  await listenIn(down, outside.netns, port, "hello");

  let host: ContainerHost | undefined;
  let runtime: ContainerRuntime | undefined;
  const runners = new TaskRunners({
    kill: async (id) => void (await host?.stopContainer(id, { graceMs: 500, remove: true })),
    worker: { pullWaitMs: 5_000 },
  });
  await runners.attach(n.agent, "agent-warm");
  // The agent's container host; started again below as a restarted agent would.
  const startHost = (warmRunners: number) =>
    ContainerHost.start({
      root: join(dir, "host"),
      images: new ImageStore({ root: join(dir, "images") }),
      network: net,
      runtime: (hooks) =>
        (runtime = new ContainerRuntime({
          root: join(dir, "containers"),
          pollIntervalMs: 100,
          diskBytes: 64 * MiB,
          ...hooks,
        })),
      capacity: { cpuCores: 2, memoryBytes: 4 * 1024 * MiB },
      allowedMountRoots: [join(dir, "allowed")],
      codeDir: join(dir, "code"),
      bridgeDir: join(dir, "bridge"),
      runners,
      // No start-up boost: the limits read below are the stub's own from the first instant.
      runnerStartupCpu: 0,
      warmRunners,
      warmRunnerImage: imageRef,
    });
  host = await startHost(1);
  let h = host;
  let rt = runtime as ContainerRuntime;
  down.defer(async () => {
    for (const c of await h.listContainers()) await h.stopContainer(c.id, { graceMs: 0, remove: true });
    await h.drainWarmRunners();
    await runners.stop();
    h.close();
    assert.deepEqual(await new Runc("runc", runcRoot).list(), [], "no runc container may be left");
    assert.deepEqual(net.list(), [], "no network lease may be left");
    assert.deepEqual(mountsUnder(dir), [], "no mount may be left");
  });

  const archive = tarGz([{ name: "app.py", data: APP_PY }]);
  const sha = sha256Hex(archive);
  await h.putCode(sha, chunks(archive));
  const request = (ws: string, stubId: string, o: Partial<RunContainerRequest>): RunContainerRequest =>
    ({
      image: imageRef,
      code: { sha256: sha },
      runner: { stubId, workspaceId: ws, stubType: "function", handler: "app:probe" },
      ...o,
    }) as RunContainerRequest;
  const warmIds = () =>
    rt
      .list()
      .filter((c) => c.id.startsWith("warm-"))
      .map((c) => c.id);
  const readyWarm = async () => {
    await waitFor(() => h.warm.available === 1 || undefined, {
      timeoutMs: 120_000,
      what: "a ready pre-warmed runner",
    });
    const ids = warmIds();
    assert.equal(ids.length, 1, `one pre-warmed runner: ${ids}`);
    return ids[0] as string;
  };
  const runTask = async (stubId: string, taskId: string) => {
    await publishTask(n, {
      stubId,
      taskId,
      payloadFormat: "json",
      payload: Buffer.from(JSON.stringify({ host: outside.primary4, port })),
    });
    const evs = await eventsOf(n, taskId, 2, 60_000);
    const fin = evs.find((e) => e.type === "finished") as Extract<TaskEvent, { type: "finished" }>;
    assert.equal(fin?.status, "COMPLETE", JSON.stringify(evs));
    return { fin, out: JSON.parse(fin.resultJson as string) };
  };
  const hostLimits = (ociId: string) => {
    const path = rt.cgroupsPath(ociId);
    const memFile =
      rt.cgroups.version === 2
        ? join(rt.cgroups.unifiedMount, path, "memory.max")
        : join(rt.cgroups.controllers.get("memory") as string, path, "memory.limit_in_bytes");
    return {
      quotaUs: readCpuLimit(rt.cgroups, path).quotaUs,
      memory: Number(readFileSync(memFile, "utf8").trim()),
      pids: readPidsLimit(rt.cgroups, path),
    };
  };

  const warmA = await readyWarm();
  const before = hostLimits(warmA);

  await t.test("before it is given, a pre-warmed runner has no code, no stub, and no way out", async () => {
    const { stdout } = await execFileP("runc", [
      "--root",
      runcRoot,
      "exec",
      warmA,
      "python3",
      "-c",
      `import os, socket, json
try:
    socket.create_connection((${JSON.stringify(outside.primary4)}, ${port}), timeout=2); reached = "OK"
except OSError as e:
    reached = "FAIL"
print(json.dumps({"code": os.listdir("/mnt/code"), "stub": [k for k in os.environ if k.startswith("BERTH_STUB")], "reached": reached}))`,
    ]);
    assert.deepEqual(JSON.parse(stdout), { code: [], stub: [], reached: "FAIL" });
  });

  const egressA: EgressPolicy = { mode: "allow", cidrs: [`${outside.primary4}/32`] };
  const a = await h.runContainer(
    request("ws-a", "stub-warm-a", {
      cpu: 0.5,
      memoryBytes: 192 * MiB,
      pidsLimit: 300,
      egress: egressA,
      env: { MY_SECRET: "secret-of-a" },
    }),
  );

  await t.test(
    "workspace A's stub gets the pre-warmed runner, with A's code, secret, limits and egress",
    async () => {
      assert.equal(rt.execTarget(a.id).ociId, warmA, "the container A got is the one that was warm");
      assert.equal(a.labels[RunnerLabels.workspaceId], "ws-a");
      assert.notDeepEqual(
        before,
        { quotaUs: 50_000, memory: 192 * MiB, pids: 300 },
        "the limits were not A's before",
      );
      const { fin, out } = await runTask("stub-warm-a", "task-warm-a");
      assert.equal(fin.containerId, a.id);
      assert.deepEqual(out, {
        cwd: "/mnt/code",
        secret: "secret-of-a",
        container: a.id,
        stub: "stub-warm-a",
        memory: String(192 * MiB),
        pids: "300",
        reached: "OK hello",
      });
      assert.deepEqual(hostLimits(warmA), { quotaUs: 50_000, memory: 192 * MiB, pids: 300 });
      await queueEmpty(n);
      // exec reaches it under its new id (runc still knows it by the old one).
      // /mnt/code is writable (Python wrote its bytecode there), into the container's own layer only.
      const ls = await execAll(
        await h.exec(a.id, {
          args: [
            "python3",
            "-c",
            "import os; open('out.txt', 'w').write('a'); print(sorted(os.listdir('.')))",
          ],
          cwd: "/mnt/code",
        }),
      );
      assert.equal(ls.stdout.trim(), "['__pycache__', 'app.py', 'out.txt']", ls.stderr);
      assert.deepEqual(
        readdirSync(join(dir, "code", sha, "mnt", "code")),
        ["app.py"],
        "the shared tree is unchanged",
      );
    },
  );

  await t.test("it never goes back to the pool: workspace B's stub gets another container", async () => {
    const warmB = await readyWarm();
    assert.notEqual(warmB, warmA, "the pool refilled with a new container, not A's");
    assert.equal((await h.getContainer(a.id)).state, "running", "A's container is still A's");
    const b = await h.runContainer(
      request("ws-b", "stub-warm-b", {
        cpu: 0.25,
        memoryBytes: 160 * MiB,
        egress: { mode: "block" },
        env: { MY_SECRET: "secret-of-b" },
      }),
    );
    assert.equal(rt.execTarget(b.id).ociId, warmB);
    assert.notEqual(rt.execTarget(b.id).ociId, rt.execTarget(a.id).ociId);
    const { fin, out } = await runTask("stub-warm-b", "task-warm-b");
    assert.equal(fin.containerId, b.id);
    assert.equal(out.secret, "secret-of-b");
    assert.equal(out.container, b.id);
    assert.equal(out.memory, String(160 * MiB));
    assert.match(out.reached, /^FAIL/, "B's egress is blocked");
    assert.deepEqual(hostLimits(warmB).memory, 160 * MiB);
    // A's container kept A's limits and still reaches what A may reach.
    const again = await runTask("stub-warm-a", "task-warm-a2");
    assert.equal(again.fin.containerId, a.id);
    assert.equal(again.out.secret, "secret-of-a");
    assert.equal(again.out.reached, "OK hello");
    await queueEmpty(n);
    for (const id of [a.id, b.id]) await h.stopContainer(id, { graceMs: 0, remove: true });
    assert.deepEqual(
      mountsUnder(join(dir, "containers")).filter((m) => m.includes(warmA) || m.includes(warmB)),
      [],
      "the given containers' mounts (code slot included) are gone with them",
    );
  });

  await t.test("a request a started container cannot take is started the ordinary way", async () => {
    const warm = await readyWarm();
    const c = await h.runContainer({
      ...request("ws-a", "stub-warm-a", { cpu: 0.25, memoryBytes: 128 * MiB }),
      args: ["python3", "-c", "import time; time.sleep(60)"],
    });
    assert.equal(rt.execTarget(c.id).ociId, c.id, "its own container");
    assert.deepEqual(warmIds(), [warm], "the pre-warmed runner is still waiting");
    await h.stopContainer(c.id, { graceMs: 0, remove: true });
  });
  await t.test(
    "a restarted agent keeps a given container as its stub's and removes one never given",
    async () => {
      await readyWarm();
      const given = await h.runContainer(
        request("ws-a", "stub-warm-a", {
          cpu: 0.25,
          memoryBytes: 128 * MiB,
          env: { MY_SECRET: "secret-of-a" },
        }),
      );
      const waiting = await readyWarm();
      const givenOci = rt.execTarget(given.id).ociId;
      h.close();
      host = h = await startHost(0);
      rt = runtime as ContainerRuntime;
      assert.deepEqual(
        (await h.listContainers()).map((c) => c.id),
        [given.id],
      );
      assert.equal(rt.execTarget(given.id).ociId, givenOci, "adopted under its id, runc's name kept");
      assert.deepEqual(warmIds(), [], `the runner never given (${waiting}) is gone`);
      const { fin, out } = await runTask("stub-warm-a", "task-warm-restart");
      assert.equal(fin.containerId, given.id);
      assert.equal(out.secret, "secret-of-a");
      await queueEmpty(n);
      await h.stopContainer(given.id, { graceMs: 0, remove: true });
    },
  );
});
