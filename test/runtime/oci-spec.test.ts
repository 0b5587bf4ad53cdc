import assert from "node:assert/strict";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import type { BerthError } from "../../shared/errors.ts";
import { detectCgroups, parseFlatKeyed, readOomState } from "../../agent/runtime/cgroups.ts";
import { LogFollower } from "../../agent/runtime/logs.ts";
import { buildOciSpec, type HostFacts } from "../../agent/runtime/oci-spec.ts";
import { clampedRlimits, parseProcLimits } from "../../agent/runtime/rlimits.ts";
import { buildSeccompProfile, DENIED_SYSCALLS } from "../../agent/runtime/seccomp.ts";
import { resolveContainerSpec } from "../../agent/runtime/spec.ts";
import { exitReason } from "../../agent/runtime/state.ts";
import type { ContainerSpec, LogLine } from "../../agent/runtime/types.ts";

// Pure logic of the runtime: no root, no runc.

const PROC_LIMITS = `Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max processes             96365                96365                processes 
Max open files            1024                 20000                files     
Max locked memory         8388608              8388608              bytes     
`;

const host = (over: Partial<HostFacts> = {}): HostFacts => ({
  cgroupVersion: 1,
  hardLimits: parseProcLimits(PROC_LIMITS),
  swapAccounting: true,
  arch: "x64",
  ...over,
});

const base: ContainerSpec = {
  id: "ctr-abc",
  image: { rootfs: "/images/a" },
  args: ["python3", "-c", "print(1)"],
  cpu: 0.5,
  memoryBytes: 64 * 1024 * 1024,
};

test("rlimits are clamped to the host's hard limits", () => {
  const limits = parseProcLimits(PROC_LIMITS);
  assert.equal(limits.get("Max open files"), 20000);
  assert.equal(limits.get("Max cpu time"), null);
  assert.deepEqual(clampedRlimits(limits), [
    { type: "RLIMIT_NOFILE", hard: 20000, soft: 20000 },
    { type: "RLIMIT_NPROC", hard: 96365, soft: 96365 },
  ]);
  const unlimited = parseProcLimits(PROC_LIMITS.replace(/20000/, "unlimited"));
  assert.equal(clampedRlimits(unlimited)[0]!.hard, 1_048_576, "unlimited hosts get the finite default");
});

test("buildOciSpec: process, resources and cgroup path", () => {
  const s = buildOciSpec({ ...base, pidsLimit: 100, labels: { app: "x" } }, host());
  assert.equal(s.ociVersion, "1.0.2");
  assert.equal(s.process.terminal, false);
  assert.equal(s.process.noNewPrivileges, true);
  assert.deepEqual(s.process.args, base.args);
  assert.ok(s.process.env.some((e) => e.startsWith("PATH=")));
  assert.deepEqual(s.process.user, { uid: 0, gid: 0, additionalGids: [] });
  assert.equal(s.root.path, "rootfs");
  assert.equal(s.hostname, "ctr-abc");
  assert.deepEqual(s.linux.resources.cpu, { quota: 50000, period: 100000, shares: 512 });
  assert.deepEqual(s.linux.resources.memory, { limit: 64 * 1024 * 1024, swap: 64 * 1024 * 1024 });
  assert.deepEqual(s.linux.resources.pids, { limit: 100 });
  assert.equal(s.linux.cgroupsPath, "/berth/ctr-abc");
  assert.equal(s.annotations?.["berth.label.app"], "x");
  assert.deepEqual(
    s.process.rlimits.find((r) => r.type === "RLIMIT_NOFILE"),
    {
      type: "RLIMIT_NOFILE",
      hard: 20000,
      soft: 20000,
    },
  );
  const caps = s.process.capabilities.bounding;
  assert.ok(caps.includes("CAP_CHOWN") && caps.includes("CAP_KILL"));
  for (const dropped of ["CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_MKNOD", "CAP_SYS_PTRACE"]) {
    assert.ok(!caps.includes(dropped), dropped);
  }
  const noSwap = buildOciSpec(base, host({ swapAccounting: false }));
  assert.equal(noSwap.linux.resources.memory?.swap, undefined);
});

test("buildOciSpec: mounts, masked paths, namespaces and devices", () => {
  const s = buildOciSpec(
    {
      ...base,
      shmBytes: 1 << 20,
      netnsPath: "/run/netns/n1",
      mounts: [{ source: "/srv/code", destination: "/code", readonly: true }],
      extraDevices: [{ path: "/dev/nvidia0", type: "c", major: 195, minor: 0 }],
      extraDeviceRules: [{ allow: true, type: "c", major: 195 }],
    },
    host({ cgroupVersion: 2 }),
  );
  const dests = s.mounts.map((m) => m.destination);
  for (const d of [
    "/proc",
    "/dev",
    "/dev/pts",
    "/dev/shm",
    "/dev/mqueue",
    "/sys",
    "/sys/fs/cgroup",
    "/tmp",
    "/code",
  ]) {
    assert.ok(dests.includes(d), d);
  }
  assert.ok(s.mounts.find((m) => m.destination === "/dev/shm")?.options?.includes("size=1048576"));
  assert.ok(s.mounts.find((m) => m.destination === "/dev/pts")?.options?.includes("ptmxmode=0666"));
  assert.ok(s.mounts.find((m) => m.destination === "/sys")?.options?.includes("ro"));
  assert.deepEqual(s.mounts.find((m) => m.destination === "/code")?.options?.slice(0, 2), ["rbind", "ro"]);
  assert.ok(s.linux.maskedPaths.includes("/proc/kcore") && s.linux.maskedPaths.includes("/sys/firmware"));
  assert.ok(s.linux.readonlyPaths.includes("/proc/sys"));
  assert.deepEqual(
    s.linux.namespaces.find((n) => n.type === "network"),
    { type: "network", path: "/run/netns/n1" },
  );
  assert.ok(
    s.linux.namespaces.some((n) => n.type === "cgroup"),
    "cgroup namespace on v2",
  );
  assert.ok(!buildOciSpec(base, host()).linux.namespaces.some((n) => n.type === "cgroup"), "none on v1");
  assert.deepEqual(s.linux.resources.devices[0], { allow: false, access: "rwm" });
  assert.ok(s.linux.resources.devices.some((d) => d.allow && d.major === 195 && d.minor === 0));
  assert.ok(s.linux.resources.devices.some((d) => d.allow && d.major === 136 && d.minor === undefined));
  assert.deepEqual(s.linux.devices, [
    { path: "/dev/nvidia0", type: "c", major: 195, minor: 0, fileMode: 0o666, uid: 0, gid: 0 },
  ]);
});

test("buildOciSpec: the default seccomp profile is the allowlist for the host's architecture", () => {
  const sc = buildOciSpec(base, host()).linux.seccomp;
  assert.equal(sc.defaultAction, "SCMP_ACT_ERRNO");
  assert.equal(sc.defaultErrnoRet, 1);
  assert.deepEqual(sc, buildSeccompProfile("x64", "allowlist"));
  assert.deepEqual(buildOciSpec(base, host({ arch: "arm64" })).linux.seccomp, buildSeccompProfile("arm64"));
  const allowed = sc.syscalls.filter((r) => r.action === "SCMP_ACT_ALLOW").flatMap((r) => r.names);
  for (const name of DENIED_SYSCALLS) assert.ok(!allowed.includes(name), name);
});

test("buildOciSpec: a spec opted out (seccomp denylist) gets the allow-by-default profile with its deny list", () => {
  const sc = buildOciSpec({ ...base, seccomp: "denylist" }, host()).linux.seccomp;
  assert.equal(sc.defaultAction, "SCMP_ACT_ALLOW");
  const denied = sc.syscalls.find((r) => r.names.includes("kexec_load"));
  assert.deepEqual([denied?.action, denied?.errnoRet], ["SCMP_ACT_ERRNO", 1]);
  assert.deepEqual(
    buildOciSpec(resolveContainerSpec({ ...base, seccomp: "denylist" }), host()).linux.seccomp,
    sc,
    "the resolved spec keeps it",
  );
});

test("resolveContainerSpec rejects bad input with the field named", () => {
  const bad: [Partial<ContainerSpec>, RegExp][] = [
    [{ args: [] }, /args/],
    [{ args: [""] }, /args\[0\] must not be empty/],
    [{ cpu: 0 }, /cpu/],
    [{ cpu: Number.NaN }, /cpu/],
    [{ memoryBytes: 5 * 1024 * 1024 }, /too small/],
    [{ memoryBytes: 1.5 }, /memoryBytes must be an integer/],
    [{ id: "../x" }, /container id/],
    [{ image: { rootfs: "/a:b" } }, /overlayfs/],
    [{ image: { rootfs: [] } }, /image.rootfs is empty/],
    [{ cwd: "tmp" }, /cwd must be an absolute path/],
    [{ env: { "A=B": "x" } }, /env/],
    [{ user: { uid: -1, gid: 0 } }, /user.uid/],
    [{ hostname: "-bad" }, /hostname/],
    [{ timeoutMs: 0 }, /timeoutMs/],
    [{ extraDevices: [{ path: "/dev/x", type: "x" as "c", major: 1, minor: 1 }] }, /extraDevices\[0\].type/],
  ];
  for (const [over, re] of bad) {
    assert.throws(
      () => resolveContainerSpec({ ...base, ...over }),
      (e: BerthError) => e.code === "invalid_request" && re.test(e.message),
      JSON.stringify(over),
    );
  }
  const r = resolveContainerSpec({ ...base, image: { rootfs: ["/l2", "/l1"] }, env: { PATH: "/x" } });
  assert.deepEqual(r.lowerDirs, ["/l2", "/l1"]);
  assert.equal(r.env.PATH, "/x");
  assert.equal(r.tmpBytes, base.memoryBytes);
  assert.equal(r.shmBytes, base.memoryBytes, "/dev/shm is sized to the memory limit, as /tmp");
});

test("exit reasons", () => {
  assert.equal(exitReason({ code: 0, oom: { oomKills: 0 } }), "exited");
  assert.equal(exitReason({ code: 3, oom: { oomKills: 0 } }), "exited");
  assert.equal(exitReason({ code: 137, oom: { oomKills: 1 } }), "oom_killed");
  assert.equal(
    exitReason({ code: 0, oom: { oomKills: 1 } }),
    "exited",
    "a container that survived an OOM kill",
  );
  assert.equal(exitReason({ code: 137, oom: { limitHits: 4 } }), "oom_killed", "old v1 kernels");
  assert.equal(exitReason({ code: 137, intent: "kill", oom: { oomKills: 0 } }), "killed");
  assert.equal(exitReason({ code: 143, intent: "term", oom: { oomKills: 0 } }), "killed");
  assert.equal(exitReason({ code: 0, intent: "term", oom: { oomKills: 0 } }), "exited");
  assert.equal(exitReason({ code: 137, intent: "timeout", oom: { oomKills: 0 } }), "timed_out");
  assert.equal(exitReason({ code: -1, oom: {} }), "unknown");
});

test("detectCgroups reads v2 and v1 layouts from mountinfo", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "berth-cg-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const v2 = join(dir, "v2");
  writeFileSync(v2, "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  assert.equal(detectCgroups(v2).version, 2);
  assert.equal(detectCgroups(v2).unifiedMount, "/sys/fs/cgroup");
  const v1 = join(dir, "v1");
  writeFileSync(
    v1,
    [
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct",
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
    ].join("\n"),
  );
  const cg = detectCgroups(v1);
  assert.equal(cg.version, 1);
  assert.equal(cg.controllers.get("cpu"), "/sys/fs/cgroup/cpu,cpuacct");
  assert.equal(cg.controllers.get("cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
  assert.equal(cg.controllers.get("unified"), "/sys/fs/cgroup/unified");
  assert.deepEqual(
    [...parseFlatKeyed("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")],
    [
      ["low", 0],
      ["high", 0],
      ["max", 3],
      ["oom", 1],
      ["oom_kill", 1],
    ],
  );
});

test("LogFollower: lines, partial lines, resume from offset, spool truncation", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "berth-logs-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "stdout.log");
  writeFileSync(path, "");
  const lines: LogLine[] = [];
  const make = (offset: number) =>
    new LogFollower({
      path,
      containerId: "c",
      stream: "stdout",
      offset,
      onLine: (l) => lines.push(l),
      maxSpoolBytes: 64,
      maxLineBytes: 32,
    });
  const f = make(0);
  appendFileSync(path, "one\ntw");
  await f.poll();
  assert.deepEqual(
    lines.map((l) => l.line),
    ["one"],
  );
  assert.equal(f.offset, 4, "the partial line is not committed");
  appendFileSync(path, "o\r\n");
  await f.poll();
  assert.deepEqual(
    lines.map((l) => l.line),
    ["one", "two"],
  );
  assert.equal(f.offset, 9);
  f.close();
  // A new follower (a restarted agent) resumes at the saved offset.
  appendFileSync(path, `three\n${"x".repeat(50)}\n`);
  const g = make(f.offset);
  await g.poll();
  assert.deepEqual(
    lines.slice(2).map((l) => l.line),
    ["three", "x".repeat(32), "x".repeat(18)],
  );
  // The spool passed 64 bytes and was fully read: it was truncated.
  assert.equal(g.offset, 0);
  appendFileSync(path, "four\nlast");
  await g.finish();
  assert.deepEqual(
    lines.slice(5).map((l) => l.line),
    ["four", "last"],
  );
  assert.match(g.tail(), /four\nlast\n$/);
  // Truncation by someone else restarts from the beginning.
  truncateSync(path, 0);
  appendFileSync(path, "again\n");
  const h = make(500);
  await h.poll();
  assert.equal(lines.at(-1)?.line, "again");
  h.close();
});

test("OOM kills are read from cgroup v2's memory.events and v1's memory.oom_control", (t) => {
  const root = mkdtempSync(join(tmpdir(), "berth-oom-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const path = "berth/ctr-1";
  // The files as the kernel writes them.
  mkdirSync(join(root, "v2", path), { recursive: true });
  writeFileSync(
    join(root, "v2", path, "memory.events"),
    "low 0\nhigh 0\nmax 31\noom 1\noom_kill 1\noom_group_kill 0\n",
  );
  const v2 = {
    version: 2 as const,
    unifiedMount: join(root, "v2"),
    controllers: new Map(),
    swapAccounting: true,
  };
  assert.deepEqual(readOomState(v2, path), { oomKills: 1 });
  assert.deepEqual(readOomState(v2, "berth/gone"), { oomKills: undefined }, "a cgroup already removed");

  mkdirSync(join(root, "v1", "memory", path), { recursive: true });
  writeFileSync(
    join(root, "v1", "memory", path, "memory.oom_control"),
    "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
  );
  writeFileSync(join(root, "v1", "memory", path, "memory.failcnt"), "57\n");
  const v1 = {
    version: 1 as const,
    unifiedMount: "",
    controllers: new Map([["memory", join(root, "v1", "memory")]]),
    swapAccounting: false,
  };
  assert.deepEqual(readOomState(v1, path), { oomKills: 2, limitHits: 57 });
  // Kernels before 4.13 have no oom_kill line: the limit hits stand in (exitReason weighs them).
  writeFileSync(join(root, "v1", "memory", path, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\n");
  assert.deepEqual(readOomState(v1, path), { oomKills: undefined, limitHits: 57 });
});
