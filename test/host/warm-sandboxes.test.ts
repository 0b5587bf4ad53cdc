// Pre-warmed sandboxes on a real ContainerHost (runc, network, the process
// server): one is given to workspace A's sandbox, which sees A's environment
// and secret in every process, A's cgroup limits and A's egress; it never
// comes back to the pool, workspace B's sandbox gets another container, a
// create the pool cannot serve starts the ordinary way, and a restarted
// agent keeps given ones and removes the ones never given.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";
import { SANDBOX_INIT_LABEL } from "../../agent/host/sandbox-init.ts";
import { warmSandboxIneligible } from "../../agent/host/warm-sandboxes.ts";
import { resolveRunRequest } from "../../agent/host/request.ts";
import { readCpuLimit, readPidsLimit } from "../../agent/runtime/index.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import type { RunContainerRequest } from "../../api/index.ts";
import { KEEP_ALIVE_ARGS } from "../../coordinator/sandboxes/request.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { waitFor } from "../../shared/net.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { needs } from "../helpers/env.ts";
import { createOutside, listenIn, randomPort } from "../network/helpers.ts";
import { execAll, HOST_COMMANDS, hostHarness, MiB } from "./harness.ts";

const execFileP = promisify(execFile);

test("which creates a pre-warmed sandbox can serve", () => {
  const sandbox = (o: Partial<RunContainerRequest> = {}) =>
    resolveRunRequest({
      id: "ctr-1",
      args: KEEP_ALIVE_ARGS,
      cpu: 1,
      memoryBytes: 256 * MiB,
      labels: { [SANDBOX_INIT_LABEL]: "1" },
      ...o,
    } as RunContainerRequest);
  assert.equal(warmSandboxIneligible(sandbox(), 0), undefined);
  assert.equal(warmSandboxIneligible(sandbox({ env: { A: "b" }, exposedPorts: [8080] }), 0), undefined);
  assert.equal(warmSandboxIneligible(sandbox({ labels: {} }), 0), "not a sandbox with a process server");
  assert.equal(warmSandboxIneligible(sandbox(), 1), "mounts");
  assert.equal(
    warmSandboxIneligible(
      sandbox({ volumes: [{ name: "v", mountPath: "/v", workspaceId: "ws" }] as never }),
      0,
    ),
    "mounts",
  );
  assert.equal(warmSandboxIneligible(sandbox({ code: { sha256: "a".repeat(64) } }), 0), "code");
  assert.equal(warmSandboxIneligible(sandbox({ isolation: "gvisor" }), 0), "gVisor");
  assert.equal(warmSandboxIneligible(sandbox({ userNamespace: false }), 0), "no user namespace");
  assert.equal(
    warmSandboxIneligible(sandbox({ syscallFilter: "denylist" }), 0),
    "the deny-list system call filter",
  );
  assert.equal(
    warmSandboxIneligible(sandbox({ cwd: "/tmp" }), 0),
    "its own user, hostname or working directory",
  );
  assert.equal(warmSandboxIneligible(sandbox({ gpu: { count: 1 } }), 0), "GPUs");
});

test("pre-warmed sandboxes: given once, with the sandbox's env, secrets, limits and egress", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const logLines: { msg: string; fields: Record<string, unknown> }[] = [];
  const logger = {
    info: (fields: Record<string, unknown>, msg: string) => logLines.push({ msg, fields }),
    warn: (fields: Record<string, unknown>, msg: string) => logLines.push({ msg, fields }),
    error: (fields: Record<string, unknown>, msg: string) => logLines.push({ msg, fields }),
  };
  const h = await hostHarness(t, { host: { warmSandboxes: 1, logger } });
  const runcRoot = join(h.dir, "containers", ".runc");
  const runcIds = async () => (await new Runc("runc", runcRoot).list()).map((c) => c.id);
  const outside = await createOutside(h.down, h.names);
  const port = randomPort();
  await listenIn(h.down, outside.netns, port, "hello");

  const readyWarm = async () => {
    await waitFor(() => h.host.warmSandboxes.available === 1 || undefined, {
      timeoutMs: 60_000,
      what: "a ready pre-warmed sandbox",
    });
    // runc keeps a given container's first name: the pool's own are those it still owns.
    const ids = (await runcIds()).filter((id) => h.host.warmSandboxes.owns(id));
    assert.equal(ids.length, 1, `one pre-warmed sandbox: ${ids}`);
    assert.match(ids[0] as string, /^warm-sbx-[0-9a-f]{12}$/);
    return ids[0] as string;
  };
  const sandbox = (ws: string, o: Partial<RunContainerRequest>) =>
    h.host.runContainer({
      args: KEEP_ALIVE_ARGS,
      cpu: 0.25,
      memoryBytes: 128 * MiB,
      ...o,
      labels: { [SANDBOX_INIT_LABEL]: "1", [RunnerLabels.workspaceId]: ws, ...o.labels },
    } as RunContainerRequest);
  const givenFromPool = (id: string) =>
    logLines.filter((l) => l.msg === "container started from a pre-warmed sandbox" && l.fields.id === id);
  const limitsOf = (ociId: string) => {
    const rt = h.runtime();
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
  // What a process of the sandbox sees: its secret, its parent (1: the process server started it), its egress.
  const probe = async (id: string) => {
    const r = await execAll(
      await h.host.exec(id, {
        args: [
          "python3",
          "-c",
          `import os, socket, json
try:
    s = socket.create_connection((${JSON.stringify(outside.primary4)}, ${port}), timeout=2)
    reached = "OK " + s.recv(64).decode().strip()
except OSError as e:
    reached = "FAIL"
print(json.dumps({"secret": os.environ.get("MY_SECRET"), "ws": os.environ.get("WS"), "ppid": os.getppid(), "cwd": os.getcwd(), "reached": reached}))`,
        ],
      }),
    );
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };

  const warmA = await readyWarm();
  const before = limitsOf(warmA);

  await t.test("before it is given, a pre-warmed sandbox has no env of anyone's and no way out", async () => {
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
except OSError:
    reached = "FAIL"
print(json.dumps({"secret": os.environ.get("MY_SECRET"), "berth": [k for k in os.environ if k.startswith("BERTH_")], "reached": reached}))`,
    ]);
    assert.deepEqual(JSON.parse(stdout), { secret: null, berth: [], reached: "FAIL" });
  });

  const egressA: EgressPolicy = { mode: "allow", cidrs: [`${outside.primary4}/32`] };
  const a = await sandbox("ws-a", {
    cpu: 0.5,
    memoryBytes: 192 * MiB,
    pidsLimit: 300,
    egress: egressA,
    env: { MY_SECRET: "secret-of-a", WS: "a" },
  });

  await t.test("workspace A's sandbox gets it, with A's env, secret, limits and egress", async () => {
    assert.equal(givenFromPool(a.id).length, 1, "the agent says it came from the pool");
    const ids = await runcIds();
    assert.ok(ids.includes(warmA) && !ids.includes(a.id), `runc still knows it as ${warmA}: ${ids}`);
    assert.notDeepEqual(before, { quotaUs: 50_000, memory: 192 * MiB, pids: 300 }, "not A's limits before");
    assert.deepEqual(limitsOf(warmA), { quotaUs: 50_000, memory: 192 * MiB, pids: 300 });
    assert.deepEqual(await probe(a.id), {
      secret: "secret-of-a",
      ws: "a",
      ppid: 1,
      cwd: "/",
      reached: "OK hello",
    });
    // Every process gets it, the second too, and an exec's own env goes over it.
    const r = await execAll(
      await h.host.exec(a.id, { args: ["sh", "-c", "echo $MY_SECRET $WS"], env: { WS: "x" } }),
    );
    assert.equal(r.stdout, "secret-of-a x\n");
    // A tty exec (a shell) goes through `runc exec`, which starts from the bundle's config.json: A's too.
    const tty = await execAll(
      await h.host.exec(a.id, { args: ["sh", "-c", "echo tty:$MY_SECRET:$WS:$(pwd)"], tty: true }),
    );
    assert.match(
      tty.stdout,
      /tty:secret-of-a:a:\/\r?\n/,
      `runc exec sees A's env: ${JSON.stringify(tty.stdout)}`,
    );
  });

  await t.test("it never goes back to the pool: workspace B's sandbox gets another container", async () => {
    const warmB = await readyWarm();
    assert.notEqual(warmB, warmA, "the pool refilled with a new container, not A's");
    const b = await sandbox("ws-b", {
      egress: { mode: "block" },
      env: { MY_SECRET: "secret-of-b", WS: "b" },
    });
    assert.equal(givenFromPool(b.id).length, 1);
    const ids = await runcIds();
    assert.ok(ids.includes(warmB) && !ids.includes(b.id), `${ids}`);
    assert.deepEqual(await probe(b.id), {
      secret: "secret-of-b",
      ws: "b",
      ppid: 1,
      cwd: "/",
      reached: "FAIL",
    });
    assert.equal(limitsOf(warmB).memory, 128 * MiB);
    // A's container kept A's.
    assert.deepEqual(await probe(a.id), {
      secret: "secret-of-a",
      ws: "a",
      ppid: 1,
      cwd: "/",
      reached: "OK hello",
    });
    await h.host.stopContainer(a.id, { graceMs: 0, remove: true });
    assert.ok(!(await runcIds()).includes(warmA), "A's container is gone with A");
    assert.equal(h.host.warmSandboxes.owns(warmA), false, "and the pool never had it back");
    const next = await readyWarm();
    assert.ok(![warmA, warmB].includes(next), `the pool holds a new one: ${next}`);
    await h.host.stopContainer(b.id, { graceMs: 0, remove: true });
  });

  await t.test("a create the pool cannot serve starts the ordinary way", async () => {
    const warm = await readyWarm();
    const withMount = await sandbox("ws-a", {
      mounts: [{ source: h.allowedRoot, destination: "/data", readOnly: true }],
      env: { MY_SECRET: "m" },
    });
    const pod = await sandbox("ws-a", {
      args: ["python3", "-c", "import time; time.sleep(60)"],
      labels: { [SANDBOX_INIT_LABEL]: "0" },
    });
    const ids = await runcIds();
    for (const c of [withMount, pod]) {
      assert.ok(ids.includes(c.id), `${c.id} runs as its own container: ${ids}`);
      assert.equal(givenFromPool(c.id).length, 0);
    }
    assert.equal(h.host.warmSandboxes.available, 1, "the pre-warmed sandbox is still waiting");
    assert.ok(ids.includes(warm));
    const r = await execAll(await h.host.exec(withMount.id, { args: ["sh", "-c", "echo $MY_SECRET"] }));
    assert.equal(r.stdout, "m\n");
    for (const c of [withMount, pod]) await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
  });

  await t.test(
    "a hand-over that fails removes that container and starts the sandbox the ordinary way",
    async () => {
      const warm = await readyWarm();
      // Its process server's directory gone: renaming it to the sandbox's id fails mid-hand-over.
      rmSync(join(h.dir, "host", "sandbox-init", warm), { recursive: true, force: true });
      const c = await sandbox("ws-a", { env: { MY_SECRET: "cold" } });
      assert.equal(givenFromPool(c.id).length, 0);
      assert.ok(
        logLines.some((l) => l.msg === "a pre-warmed sandbox could not be given" && l.fields.id === c.id),
        "the agent says the hand-over failed",
      );
      const ids = await runcIds();
      assert.ok(ids.includes(c.id), `${c.id} runs as its own container: ${ids}`);
      await waitFor(async () => !(await runcIds()).includes(warm) || undefined, {
        timeoutMs: 20_000,
        what: `the failed pre-warmed sandbox ${warm} removed`,
      });
      assert.deepEqual(await probe(c.id), {
        secret: "cold",
        ws: null,
        ppid: 1,
        cwd: "/",
        reached: "OK hello",
      });
      await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
    },
  );

  await t.test("a restarted agent keeps a given sandbox and removes the one never given", async () => {
    await readyWarm();
    const given = await sandbox("ws-a", { env: { MY_SECRET: "kept" } });
    const waiting = await readyWarm();
    const givenOci = (await runcIds()).find((id) => id.startsWith("warm-sbx-") && id !== waiting);
    await h.restart();
    assert.deepEqual(
      (await h.host.listContainers()).map((c) => c.id),
      [given.id],
    );
    const ids = await runcIds();
    assert.ok(!ids.includes(waiting), `the one never given (${waiting}) is gone: ${ids}`);
    assert.ok(givenOci && ids.includes(givenOci), "the given one runs on under runc's name");
    const r = await execAll(await h.host.exec(given.id, { args: ["sh", "-c", "echo $MY_SECRET $PPID"] }));
    assert.equal(r.stdout, "kept 1\n", "its process server still serves it, env and all");
    await readyWarm();
  });
});
