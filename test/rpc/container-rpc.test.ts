// The container RPCs end to end over both transports against an in-memory
// ContainerApi: what the client sends is what the implementation receives,
// and what it answers is what the client gets. Logs and exec, the streaming
// calls, are in container-stream-rpc.test.ts.

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import type { ContainerStatus, RunContainerRequest } from "../../api/index.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { tempDir } from "../helpers/env.ts";
import { collect, containerSuites, isBerth } from "./container-rpc-suite.ts";
import { FakeAgent } from "./fake-agent.ts";
import { sampleImage, sampleStatus } from "../helpers/wire-samples.ts";

const fullRequest: RunContainerRequest = {
  id: "ctr-full",
  image: "docker.io/library/python:3.12-slim",
  imageCredentials: { username: "bot", password: "s3cret" },
  args: ["python", "-c", "print('hi')", ""],
  env: { A: "1", EMPTY: "", "WITH=EQ": "x=y", UNICODE: "héllo ✓" },
  cwd: "/work",
  user: "1000:1000",
  hostname: "box",
  cpu: 1.25,
  memoryBytes: 5 * 1024 ** 3 + 7,
  pidsLimit: 512,
  gpu: { count: 2, types: ["H100", "A100"] },
  egress: { mode: "allow", cidrs: ["10.0.0.0/8", "2001:db8::/32"] },
  exposedPorts: [8080, 65535],
  mounts: [
    { source: "/srv/data", destination: "/data", readOnly: true },
    { source: "/srv/cache", destination: "/cache" },
  ],
  timeoutMs: 3_600_000,
  labels: { app: "web", "berth.dev/sandbox": "sb-1" },
  startupWindowMs: 30_000,
  code: { sha256: "ab".repeat(32) },
  runner: {
    stubId: "stub-1",
    workspaceId: "ws-1",
    stubType: "function",
    handler: "app:square",
    onStart: "app:load",
    pythonVersion: "python3.11",
    callbackUrl: "https://example.test/cb",
    retryFor: ["ValueError", "mymod.Flaky"],
    workers: 2,
    configVersion: 7,
  },
  isolation: "gvisor",
  userNamespace: false,
  syscallFilter: "denylist",
  gang: {
    id: "gang-1",
    vni: 16_777_215,
    rank: 1,
    size: 2,
    hosts: ["192.0.2.10", "192.0.2.11"],
    subnet: "10.251.0.0/24",
    masterPort: 29500,
  },
};

containerSuites("container RPCs", (h) => {
  test("RunContainer carries every field, and absent ones stay absent", async () => {
    const { client, fake } = h;
    const status = await client.runContainer(fullRequest);
    assert.deepEqual(fake.lastCall("runContainer"), [fullRequest]);
    assert.deepEqual(status, fake.containers.get("ctr-full"));

    const minimal: RunContainerRequest = { args: [], cpu: 0.1, memoryBytes: 1 };
    await client.runContainer(minimal);
    assert.deepEqual(fake.lastCall("runContainer"), [minimal]);

    // A share of a shared GPU (docs/gpus.md, "Shared GPUs").
    const share: RunContainerRequest = {
      ...minimal,
      id: "ctr-share",
      gpu: { count: 1, types: ["H200"], memoryMiB: 8192 },
    };
    await client.runContainer(share);
    assert.deepEqual(fake.lastCall("runContainer"), [share]);
    // The defaults given are carried as given: true is not false, nor absent.
    const defaults: RunContainerRequest = {
      ...minimal,
      id: "ctr-defaults",
      userNamespace: true,
      syscallFilter: "allowlist",
    };
    await client.runContainer(defaults);
    assert.deepEqual(fake.lastCall("runContainer"), [defaults]);
  });

  test("a request the wire cannot carry is refused before it is sent", async () => {
    const { client, fake } = h;
    const before = fake.calls.length;
    await assert.rejects(
      client.runContainer({ args: [], cpu: 1, memoryBytes: -1 }),
      isBerth("invalid_request", /memoryBytes must be an integer/),
    );
    await assert.rejects(
      client.runContainer({ args: [], cpu: 1, memoryBytes: 1, exposedPorts: [70000] }),
      isBerth("invalid_request", /exposedPorts\[0\]/),
    );
    // A mistyped opt-out: the wire's bool would carry any truthy value as true.
    await assert.rejects(
      client.runContainer({ args: [], cpu: 1, memoryBytes: 1, userNamespace: "false" as never }),
      isBerth("invalid_request", /userNamespace must be true or false/),
    );
    const gang = { id: "g", vni: 1, rank: 0, size: 1, hosts: ["192.0.2.1"], subnet: "10.251.0.0/24" };
    await assert.rejects(
      client.runContainer({ args: [], cpu: 1, memoryBytes: 1, gang: { ...gang, masterPort: 70000 } }),
      isBerth("invalid_request", /gang\.masterPort/),
    );
    assert.equal(fake.calls.length, before);
  });

  test("container statuses round-trip with every exit reason and optional field", async () => {
    const { client, fake } = h;
    const variants: ContainerStatus[] = [
      sampleStatus("ctr-created", { state: "created", pid: 0, startedAt: undefined }),
      sampleStatus("ctr-gpu", {
        gpus: ["GPU-aaaa", "MIG-bbbb"],
        ipv6: "fd00::2",
        egress: { mode: "block" },
        exposedPorts: [22, 8080],
      }),
      sampleStatus("ctr-share", { gpus: ["GPU-dddd"], gpuMemoryMiB: 8192 }),
      ...(["exited", "oom_killed", "killed", "timed_out", "unknown"] as const).map((reason, i) =>
        sampleStatus(`ctr-${reason}`, {
          state: "stopped",
          exitedAt: 1_700_000_001_000 + i,
          exitCode: reason === "exited" ? 0 : 137,
          reason,
          egress: { mode: "allow", cidrs: ["192.168.0.0/16"] },
        }),
      ),
      sampleStatus("ctr-negative", { state: "stopped", exitCode: -1, reason: "unknown", labels: {} }),
    ];
    for (const v of variants) {
      if (v.startedAt === undefined) delete v.startedAt;
      fake.containers.set(v.id, v);
    }
    for (const v of variants) assert.deepEqual(await client.getContainer(v.id), v);

    const web = await client.listContainers({ labels: { app: "web" } });
    assert.deepEqual(fake.lastCall("listContainers"), [{ labels: { app: "web" } }]);
    assert.ok(web.length > 0 && web.every((s) => s.labels.app === "web"));
    assert.ok(!web.some((s) => s.id === "ctr-negative"));
    const all = await client.listContainers();
    assert.deepEqual(fake.lastCall("listContainers"), [undefined]);
    assert.deepEqual(all, [...fake.containers.values()]);
  });

  test("StopContainer passes grace and remove, or nothing", async () => {
    const { client, fake } = h;
    await client.runContainer({ id: "ctr-stop", args: [], cpu: 1, memoryBytes: 1024 });
    const stopped = await client.stopContainer("ctr-stop", { graceMs: 2500, remove: false });
    assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-stop", { graceMs: 2500, remove: false }]);
    assert.equal(stopped.state, "stopped");
    assert.equal(stopped.reason, "killed");
    assert.equal(stopped.exitCode, 143);
    await client.stopContainer("ctr-stop");
    assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-stop", {}]);
    await client.stopContainer("ctr-stop", { remove: true });
    assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-stop", { remove: true }]);
    await assert.rejects(client.getContainer("ctr-stop"), isBerth("not_found"));
  });

  test("SetNetworkPolicy carries each egress variant both ways", async () => {
    const { client, fake } = h;
    await client.runContainer({ id: "ctr-net", args: [], cpu: 1, memoryBytes: 1024 });
    const policies: EgressPolicy[] = [
      { mode: "block" },
      { mode: "allow", cidrs: ["10.1.0.0/16", "fd00::/8"] },
      { mode: "open" },
    ];
    for (const policy of policies) {
      const s = await client.setNetworkPolicy("ctr-net", policy);
      assert.deepEqual(fake.lastCall("setNetworkPolicy"), ["ctr-net", policy]);
      assert.deepEqual(s.egress, policy);
    }
    // The agent checks CIDRs by the public API's rules.
    await assert.rejects(
      client.setNetworkPolicy("ctr-net", { mode: "allow", cidrs: ["example.com/8"] }),
      isBerth("invalid_request", /not in CIDR notation/),
    );
  });

  test("ExposePort carries id and port and answers the container; bad ports never leave the client", async () => {
    const { client, fake } = h;
    await client.runContainer({ id: "ctr-port", args: [], cpu: 1, memoryBytes: 1024 });
    const s = await client.exposePort("ctr-port", 8000);
    assert.deepEqual(fake.lastCall("exposePort"), ["ctr-port", 8000]);
    assert.deepEqual(s.exposedPorts, [8000]);
    assert.deepEqual((await client.exposePort("ctr-port", 65535)).exposedPorts, [8000, 65535]);
    const calls = fake.calls.length;
    for (const bad of [0, -1, 65536, 80.5]) {
      await assert.rejects(client.exposePort("ctr-port", bad), isBerth("invalid_request", /1\.\.65535/));
    }
    assert.equal(fake.calls.length, calls, "refused before it was sent");
    await assert.rejects(client.exposePort("ctr-none", 8000), isBerth("not_found"));
  });

  test("images: pull with credentials, list, remove", async () => {
    const { client, fake } = h;
    assert.deepEqual(
      await client.pullImage("python:3.12-slim", { credentials: { username: "u", password: "p" } }),
      sampleImage,
    );
    assert.deepEqual(fake.lastCall("pullImage"), [
      "python:3.12-slim",
      { credentials: { username: "u", password: "p" } },
    ]);
    await client.pullImage("python:3.12-slim");
    assert.deepEqual(fake.lastCall("pullImage"), ["python:3.12-slim", undefined]);
    assert.deepEqual(await client.listImages(), [sampleImage]);
    await client.removeImage("python:3.12-slim");
    assert.deepEqual(fake.lastCall("removeImage"), ["python:3.12-slim"]);
    assert.deepEqual(await client.listImages(), []);
    await assert.rejects(
      client.removeImage("python:3.12-slim"),
      isBerth("not_found", /image python:3.12-slim/),
    );
    fake.images = [sampleImage];
  });

  test("ImportImage carries path, name and kind; GcImages carries unusedForMs and the result", async () => {
    const { client, fake } = h;
    const imported = await client.importImage({
      path: "/srv/images/app.tar",
      name: "app:1",
      kind: "oci-archive",
    });
    assert.deepEqual(fake.lastCall("importImage"), [
      { path: "/srv/images/app.tar", name: "app:1", kind: "oci-archive" },
    ]);
    assert.deepEqual(imported, fake.images.at(-1));
    for (const kind of ["auto", "docker-archive", "rootfs"] as const) {
      await client.importImage({ path: "/srv/x", name: "x:1", kind });
      assert.deepEqual(fake.lastCall("importImage"), [{ path: "/srv/x", name: "x:1", kind }]);
    }
    await client.importImage({ path: "/srv/y", name: "y:1" });
    assert.deepEqual(fake.lastCall("importImage"), [{ path: "/srv/y", name: "y:1", kind: "auto" }]);
    await assert.rejects(
      client.importImage({ path: "rel/app.tar", name: "app:1" }),
      isBerth("invalid_request", /rel\/app.tar is relative/),
    );
    await assert.rejects(
      // biome-ignore lint/suspicious/noExplicitAny: a kind the type forbids, as a JS caller could send
      client.importImage({ path: "/a", name: "a", kind: "zip" as any }),
      isBerth("invalid_request", /import kind zip/),
    );

    assert.deepEqual(await client.gcImages(), { removedImages: [], freedBytes: 0 });
    assert.deepEqual(fake.lastCall("gcImages"), [{}]);
    const unused = fake.images.filter((i) => !i.inUse);
    const r = await client.gcImages({ unusedForMs: 86_400_000 });
    assert.deepEqual(fake.lastCall("gcImages"), [{ unusedForMs: 86_400_000 }]);
    assert.deepEqual(
      r.removedImages,
      unused.map((i) => i.digest),
    );
    assert.equal(
      r.freedBytes,
      unused.reduce((n, i) => n + i.sizeBytes, 0),
    );
    assert.deepEqual(fake.images, [sampleImage]);
    await client.gcImages({ unusedForMs: 0 });
    assert.deepEqual(fake.lastCall("gcImages"), [{ unusedForMs: 0 }]);
    await assert.rejects(client.gcImages({ unusedForMs: -1 }), isBerth("invalid_request", /unusedForMs/));
  });

  test("BerthErrors cross the wire with code, message and details", async () => {
    const { client, fake } = h;
    const e = await client.getContainer("ctr-missing").catch((err: unknown) => err);
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "not_found");
    assert.equal(e.message, "container ctr-missing not found");
    assert.deepEqual(e.details, { containerId: "ctr-missing" });

    fake.failWith = new BerthError("resource_exhausted", "not enough memory: 64 GiB asked, 8 GiB free", {
      askedBytes: 64 * 1024 ** 3,
      freeBytes: 8 * 1024 ** 3,
      nested: { gpus: ["H100"] },
    });
    try {
      const r = await client
        .runContainer({ args: [], cpu: 1, memoryBytes: 64 * 1024 ** 3 })
        .catch((x: unknown) => x);
      assert.ok(r instanceof BerthError);
      assert.equal(r.code, "resource_exhausted");
      assert.equal(r.kind, "ResourceExhausted");
      assert.equal(r.message, "not enough memory: 64 GiB asked, 8 GiB free");
      assert.deepEqual(r.details, (fake.failWith as BerthError).details);
      await assert.rejects(client.exec("ctr-exec", { args: ["sleep"] }), isBerth("resource_exhausted"));
      await assert.rejects(collect(client.streamLogs("ctr-logs")), isBerth("resource_exhausted"));
    } finally {
      fake.failWith = undefined;
    }
  });
});

test("an agent without a container host answers the container RPCs with not_implemented", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const server = await startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path });
  t.after(() => server.close());
  const client = new AgentRpcClient({ address: `unix://${path}` });
  t.after(() => client.close());
  const unimplemented = isBerth("not_implemented", /does not serve the container API/);
  assert.equal((await client.health()).status, "SERVING");
  await assert.rejects(client.getContainer("ctr-1"), unimplemented);
  await assert.rejects(client.runContainer({ args: [], cpu: 1, memoryBytes: 1 }), unimplemented);
  await assert.rejects(client.listImages(), unimplemented);
  await assert.rejects(client.importImage({ path: "/a.tar", name: "a" }), unimplemented);
  await assert.rejects(client.gcImages(), unimplemented);
  await assert.rejects(client.exposePort("ctr-1", 8000), unimplemented);
  await assert.rejects(collect(client.streamLogs("ctr-1", { follow: true })), unimplemented);
  await assert.rejects(client.exec("ctr-1", { args: ["sh"] }), unimplemented);
});
