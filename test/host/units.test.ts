// Pure logic of the container host: GPU assignment, allocation refusals,
// request validation and spec building. No root, no devices.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { GpuDevice, GpuReport } from "../../shared/fleet.ts";
import { Allocations, pickGpus } from "../../agent/host/allocations.ts";
import { buildContainerSpec } from "../../agent/host/container-spec.ts";
import { resolveExecRequest, runcExecArgv } from "../../agent/host/exec.ts";
import { parseUser, resolveRunRequest } from "../../agent/host/request.ts";
import { resolveContainerSpec } from "../../agent/runtime/spec.ts";

const gpu = (index: number, type: string, extra: Partial<GpuDevice> = {}): GpuDevice => ({
  index,
  uuid: `GPU-${type}-${index}`,
  model: `NVIDIA ${type}`,
  type,
  memoryMiB: 80_000,
  ...extra,
});

const report = (devices: GpuDevice[]): GpuReport => ({ available: true, toolkit: false, devices });

const code = (c: string, re: RegExp) => (e: unknown) => {
  const err = e as { code?: string; message?: string };
  assert.equal(err.code, c, err.message);
  assert.match(err.message ?? "", re);
  return true;
};

test("GPUs are assigned exclusively, lowest index first", () => {
  const r = report([gpu(1, "A100"), gpu(0, "A100"), gpu(2, "A100")]);
  const first = pickGpus(r, { count: 2 }, new Set());
  assert.deepEqual(
    first.map((g) => g.uuid),
    ["GPU-A100-0", "GPU-A100-1"],
  );
  const second = pickGpus(r, { count: 1 }, new Set(first.map((g) => g.uuid)));
  assert.deepEqual(
    second.map((g) => g.uuid),
    ["GPU-A100-2"],
  );
  assert.throws(
    () => pickGpus(r, { count: 1 }, new Set(["GPU-A100-0", "GPU-A100-1", "GPU-A100-2"])),
    code("resource_exhausted", /asked for 1 GPU, this host has 3 \(0 free\)/),
  );
});

test("the type priority list is tried in order, one type per container", () => {
  const r = report([gpu(0, "A100"), gpu(1, "H100"), gpu(2, "H100"), gpu(3, "A100")]);
  assert.deepEqual(
    pickGpus(r, { count: 2, types: ["H100", "A100"] }, new Set()).map((g) => g.uuid),
    ["GPU-H100-1", "GPU-H100-2"],
  );
  // One H100 busy: two H100s no longer fit, so the next type on the list is used.
  assert.deepEqual(
    pickGpus(r, { count: 2, types: ["h100", "A100"] }, new Set(["GPU-H100-1"])).map((g) => g.uuid),
    ["GPU-A100-0", "GPU-A100-3"],
  );
  assert.throws(
    () => pickGpus(r, { count: 3, types: ["H100", "A100"] }, new Set()),
    code(
      "resource_exhausted",
      /asked for 3 GPUs of type H100 or A100, this host has H100: 2 \(2 free\), A100: 2 \(2 free\)/,
    ),
  );
  assert.throws(
    () => pickGpus(r, { count: 1, types: ["T4"] }, new Set()),
    code("resource_exhausted", /type T4, this host has T4: 0 \(0 free\)/),
  );
});

test("without types one type with room is preferred, else any free GPUs", () => {
  const r = report([gpu(0, "A100"), gpu(1, "H100"), gpu(2, "H100")]);
  assert.deepEqual(
    pickGpus(r, { count: 2 }, new Set()).map((g) => g.uuid),
    ["GPU-H100-1", "GPU-H100-2"],
  );
  assert.equal(pickGpus(r, { count: 3 }, new Set()).length, 3);
});

test("a MIG instance and its parent GPU are never given out together", () => {
  const parent = gpu(0, "A100");
  const mig = gpu(0, "A100", { uuid: "MIG-1", mig: { profile: "1g.10gb", parentUuid: parent.uuid } });
  const r = report([parent, mig, gpu(1, "A100")]);
  assert.deepEqual(
    pickGpus(r, { count: 1 }, new Set(["MIG-1"])).map((g) => g.uuid),
    ["GPU-A100-1"],
  );
  assert.deepEqual(
    pickGpus(r, { count: 1, types: ["A100"] }, new Set([parent.uuid])).map((g) => g.uuid),
    ["GPU-A100-1"],
  );
});

test("a GPU request on a host without GPUs is refused with the reason", () => {
  assert.throws(
    () => pickGpus(undefined, { count: 1 }, new Set()),
    code("resource_exhausted", /this host has none$/),
  );
  assert.throws(
    () =>
      pickGpus(
        { available: false, reason: "nvidia-smi not found", toolkit: false, devices: [] },
        { count: 1 },
        new Set(),
      ),
    code("resource_exhausted", /asked for 1 GPU, this host has none: nvidia-smi not found/),
  );
  assert.deepEqual(pickGpus(undefined, undefined, new Set()), []);
});

test("CPU and memory allocations are refused past the host's totals, saying what is free", () => {
  const host = { cpuCores: 2, memoryBytes: 4 * 1024 ** 3 };
  const a = new Allocations();
  a.hold("a", { cpu: 0.5, memoryBytes: 1024 ** 3, gpus: [] });
  assert.throws(
    () => a.checkFits(host, { cpu: 64, memoryBytes: 1024 ** 2 * 64 }),
    code("resource_exhausted", /^asked for 64 cores, this host has 2 cores \(1\.5 cores free\)$/),
  );
  assert.throws(
    () => a.checkFits(host, { cpu: 1, memoryBytes: 1024 ** 4 }),
    code("resource_exhausted", /asked for 1024 GiB of memory, this host has 4 GiB \(3 GiB free\)/),
  );
  a.checkFits(host, { cpu: 1.5, memoryBytes: 3 * 1024 ** 3 });
  a.free("a");
  a.checkFits(host, { cpu: 2, memoryBytes: 4 * 1024 ** 3 });
  const over = new Allocations(2);
  over.hold("x", { cpu: 3, memoryBytes: 1, gpus: [] });
  over.checkFits(host, { cpu: 1, memoryBytes: 1 });
  assert.throws(
    () => over.checkFits(host, { cpu: 1.5, memoryBytes: 1 }),
    code("resource_exhausted", /x2 overcommit/),
  );
});

test("requests are checked field by field before anything starts", () => {
  const ok = { args: ["true"], cpu: 1, memoryBytes: 64 * 1024 ** 2 };
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ args: "true" }, /args must be a list of strings/],
    [{ args: [1] }, /args must be a list of strings/],
    [{ cpu: 0 }, /cpu must be a number of cores >= 0.01/],
    [{ cpu: Number.NaN }, /cpu must be/],
    [{ memoryBytes: 1024 }, /memoryBytes 1024 is too small/],
    [{ memoryBytes: 1.5 }, /memoryBytes must be an integer/],
    [{ env: { A: 1 } }, /env "A" is invalid/],
    [{ env: { "A=B": "x" } }, /env "A=B" is invalid/],
    [{ id: "../x" }, /container id "\.\.\/x" is invalid/],
    [{ user: "root" }, /user must be "uid" or "uid:gid"/],
    [{ cwd: "rel" }, /cwd must be an absolute path/],
    [{ exposedPorts: [0] }, /exposedPorts: 0 is not a port/],
    [{ mounts: [{ source: "x", destination: "/y" }] }, /mounts\[0\]\.source must be an absolute path/],
    [{ egress: { mode: "allow", cidrs: ["nope"] } }, /"nope" is not in CIDR notation/],
    [{ gpu: { count: -1 } }, /gpu.count must be an integer >= 0/],
    [{ labels: { a: 2 } }, /labels "a" is invalid/],
    [{ userNamespace: "false" }, /userNamespace must be true or false, got "false"/],
    [{ userNamespace: 0 }, /userNamespace must be true or false, got 0/],
    [{ syscallFilter: "none" }, /syscallFilter must be one of "allowlist", "denylist", got "none"/],
    [{ syscallFilter: true }, /syscallFilter must be one of/],
  ];
  for (const [patch, re] of bad) {
    assert.throws(
      () => resolveRunRequest({ ...ok, ...patch } as never),
      code("invalid_request", re),
      JSON.stringify(patch),
    );
  }
  const r = resolveRunRequest({ ...ok, user: "1000", egress: { mode: "allow", cidrs: ["10.1.2.3/8"] } });
  assert.match(r.id, /^ctr-/);
  assert.deepEqual(r.user, { uid: 1000, gid: 1000 });
  assert.deepEqual(r.egress, { mode: "allow", cidrs: ["10.0.0.0/8"] });
  assert.deepEqual(parseUser("5:6"), { uid: 5, gid: 6 });
});

test("a workspace's opt-outs reach the resolved request and the spec; the defaults stay absent", () => {
  const ok = { id: "c-opt", args: ["true"], cpu: 1, memoryBytes: 64 * 1024 ** 2 };
  const image = {
    ref: "r/x:1",
    layers: ["/images/l/a"],
    config: { env: [], entrypoint: [], cmd: [], workingDir: "", user: "" },
  };
  const plain = resolveRunRequest(ok);
  assert.equal("userNamespace" in plain, false);
  assert.equal("syscallFilter" in plain, false);
  assert.equal(buildContainerSpec({ req: plain, image, mounts: [] }).seccomp, undefined);
  const defaults = resolveRunRequest({ ...ok, userNamespace: true, syscallFilter: "allowlist" });
  assert.equal("userNamespace" in defaults, false, "the default given is the default absent");
  assert.equal("syscallFilter" in defaults, false);
  const out = resolveRunRequest({ ...ok, userNamespace: false, syscallFilter: "denylist" });
  assert.equal(out.userNamespace, false);
  assert.equal(out.syscallFilter, "denylist");
  const spec = buildContainerSpec({ req: out, image, mounts: [] });
  assert.equal(spec.seccomp, "denylist");
  assert.equal(resolveContainerSpec(spec).seccomp, "denylist");
  assert.throws(
    () => resolveContainerSpec({ ...spec, seccomp: "off" as never }),
    code("invalid_request", /seccomp must be one of allowlist, denylist, got "off"/),
  );
});

test("the spec takes the image's entrypoint, env, cwd and user, and the GPU injection", () => {
  const req = resolveRunRequest({
    id: "c1",
    args: [],
    env: { B: "req" },
    cpu: 1,
    memoryBytes: 64 * 1024 ** 2,
  });
  const image = {
    ref: "r/x:1",
    layers: ["/images/l/b", "/images/l/a"],
    config: {
      env: ["A=img", "B=img"],
      entrypoint: ["/bin/ep"],
      cmd: ["arg"],
      workingDir: "/app",
      user: "7:8",
    },
  };
  const spec = buildContainerSpec({
    req,
    image,
    mounts: [],
    net: {
      netnsPath: "/run/netns/n",
      resolvConfPath: "/r.conf",
      ipv4: "10.88.0.5",
      prefix4: 16,
      gateway4: "10.88.0.1",
      ipv6: "fd00:88::5",
      prefix6: 64,
      gateway6: "fd00:88::1",
    },
    hostsFile: "/h",
    gpu: {
      env: { NVIDIA_VISIBLE_DEVICES: "GPU-1" },
      mounts: [
        {
          source: "/usr/lib/libcuda.so.1",
          destination: "/usr/lib/libcuda.so.1",
          type: "bind",
          options: ["ro", "nosuid", "nodev", "bind"],
        },
      ],
      devices: [{ path: "/dev/nvidia0", type: "c", major: 195, minor: 0, fileMode: 0o666, uid: 0, gid: 0 }],
      deviceCgroupRules: [{ allow: true, type: "c", major: 195, minor: 0, access: "rwm" }],
      hooks: {},
    },
  });
  assert.deepEqual(spec.args, ["/bin/ep", "arg"]);
  assert.deepEqual(spec.env, { A: "img", B: "req", NVIDIA_VISIBLE_DEVICES: "GPU-1" });
  assert.equal(spec.cwd, "/app");
  assert.deepEqual(spec.user, { uid: 7, gid: 8 });
  assert.equal(spec.netnsPath, "/run/netns/n");
  assert.deepEqual(spec.netnsAddresses, {
    ipv4: "10.88.0.5/16",
    ipv6: "fd00:88::5/64",
    gateway4: "10.88.0.1",
    gateway6: "fd00:88::1",
  });
  assert.deepEqual(
    spec.mounts?.map((m) => [m.destination, m.readonly, m.options ?? []]),
    [
      ["/etc/resolv.conf", true, []],
      ["/etc/hosts", true, []],
      ["/usr/lib/libcuda.so.1", true, []],
    ],
  );
  assert.equal(spec.extraDevices?.[0]?.path, "/dev/nvidia0");
  assert.equal(spec.extraDeviceRules?.length, 1);
  assert.deepEqual(spec.image.rootfs, ["/images/l/b", "/images/l/a"]);
  // The code's layer goes uppermost: its mnt/code is the container's working directory, writable through its upper dir.
  const withCode = buildContainerSpec({ req, image, mounts: [], codeLayer: "/code/abc" });
  assert.deepEqual(withCode.image.rootfs, ["/code/abc", "/images/l/b", "/images/l/a"]);
  assert.deepEqual(withCode.mounts, [], "no mount for the code");
  const noCmd = { ...image, config: { ...image.config, entrypoint: [], cmd: [] } };
  assert.throws(
    () => buildContainerSpec({ req, image: noCmd, mounts: [] }),
    code("invalid_request", /no entrypoint or cmd/),
  );
});

test("runc exec gets the container's process with only args, env, cwd and user changed", () => {
  const r = resolveExecRequest({
    args: ["ls", "-l"],
    env: { A: "1" },
    cwd: "/tmp",
    user: "1000:1000",
    tty: true,
  });
  assert.deepEqual(
    runcExecArgv({ runc: "runc", runcRoot: "/rr", containerId: "c", tmpDir: "/t" }, r, "/t/pid"),
    [
      "--root",
      "/rr",
      "exec",
      "--pid-file",
      "/t/pid",
      "--tty",
      "--cwd",
      "/tmp",
      "--user",
      "1000:1000",
      "--env",
      "A=1",
      "c",
      "ls",
      "-l",
    ],
  );
  assert.throws(() => resolveExecRequest({ args: [] }), code("invalid_request", /non-empty list/));
});
