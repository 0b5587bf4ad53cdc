import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import type { BerthError } from "../../shared/errors.ts";
import { waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import { type Harness, py, runtimeHarness } from "./harness.ts";

const MiB = 1024 * 1024;
const REQ = { root: true, commands: ["runc", "mount", "umount"] };

/** Runs a python3 script in a new container of `h`, which must exit 0; its first line, parsed as JSON. */
async function printedJson(h: Harness, script: string): Promise<ReturnType<typeof JSON.parse>> {
  const spec = h.spec(py(script));
  await h.rt.run(spec);
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.exitCode, 0, exit.stderrTail);
  return JSON.parse(h.linesOf(spec.id)[0] ?? "null");
}

test("prints via onLog and exits 0 with reason exited", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("print(42)"));
  const info = await h.rt.run(spec);
  assert.equal(info.status, "running");
  assert.ok(info.pid > 0);
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.exitCode, 0);
  assert.equal(exit.reason, "exited");
  assert.deepEqual(h.linesOf(spec.id), ["42"]);
  assert.ok(h.events.some((e) => e.type === "start" && e.containerId === spec.id && e.pid === info.pid));
  const after = h.rt.get(spec.id);
  assert.equal(after?.status, "stopped");
  assert.equal(after?.exitCode, 0);
});

test("exit code and stderr propagate", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("import sys; print('going down', file=sys.stderr); sys.exit(3)"));
  await h.rt.run(spec);
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.exitCode, 3);
  assert.equal(exit.reason, "exited");
  assert.deepEqual(h.linesOf(spec.id, "stderr"), ["going down"]);
  assert.match(exit.stderrTail, /going down/);
});

test("memory limit: a 200 MB allocation under 64 MiB is oom_killed", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("b = b'x' * (200 * 1024 * 1024); print('survived', len(b))"), {
    memoryBytes: 64 * MiB,
  });
  await h.rt.run(spec);
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.reason, "oom_killed");
  assert.equal(exit.exitCode, 137);
  assert.deepEqual(h.linesOf(spec.id), []);
});

test("cpu quota, memory and pids limits reach the cgroup; pids are enforced", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const script = [
    "import os, time",
    "n = 0",
    "err = None",
    "try:",
    "    for i in range(64):",
    "        pid = os.fork()",
    "        if pid == 0:",
    "            time.sleep(30); os._exit(0)",
    "        n += 1",
    "except OSError as e:",
    "    err = e.errno",
    "print('forked', n, 'errno', err)",
    "time.sleep(60)",
  ].join("\n");
  const spec = h.spec(py(script), { cpu: 0.5, pidsLimit: 8, memoryBytes: 96 * MiB });
  await h.rt.run(spec);
  const line = await waitFor(() => h.linesOf(spec.id)[0], { timeoutMs: 20_000, what: "fork report" });
  // pid 1 (python) + 7 children = 8; the 8th fork fails with EAGAIN.
  assert.equal(line, "forked 7 errno 11");
  const cgPath = h.rt.cgroupsPath(spec.id);
  const cg = h.rt.cgroups;
  if (cg.version === 1) {
    const cpu = join(cg.controllers.get("cpu")!, cgPath);
    assert.equal(readFileSync(join(cpu, "cpu.cfs_quota_us"), "utf8").trim(), "50000");
    assert.equal(readFileSync(join(cpu, "cpu.cfs_period_us"), "utf8").trim(), "100000");
    assert.equal(readFileSync(join(cg.controllers.get("pids")!, cgPath, "pids.max"), "utf8").trim(), "8");
    const mem = join(cg.controllers.get("memory")!, cgPath);
    assert.equal(readFileSync(join(mem, "memory.limit_in_bytes"), "utf8").trim(), String(96 * MiB));
  } else {
    const dir = join(cg.unifiedMount, cgPath);
    assert.equal(readFileSync(join(dir, "cpu.max"), "utf8").trim(), "50000 100000");
    assert.equal(readFileSync(join(dir, "pids.max"), "utf8").trim(), "8");
    assert.equal(readFileSync(join(dir, "memory.max"), "utf8").trim(), String(96 * MiB));
  }
  const usage = h.rt.usage(spec.id);
  assert.ok(usage.memoryBytes > 0 && usage.cpuUsageNs > 0);
  await h.rt.delete(spec.id);
  assert.equal(h.rt.get(spec.id), undefined);
});

test("startupCpu caps the container until endStartupCpu, then cpu does (also after a restart of the runtime)", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const quota = (id: string) => {
    const cg = h.rt.cgroups;
    const cgPath = h.rt.cgroupsPath(id);
    if (cg.version === 1) {
      return readFileSync(join(cg.controllers.get("cpu")!, cgPath, "cpu.cfs_quota_us"), "utf8").trim();
    }
    return readFileSync(join(cg.unifiedMount, cgPath, "cpu.max"), "utf8")
      .trim()
      .split(" ")[0];
  };
  const boosted = h.spec(["sleep", "100"], { cpu: 0.25, startupCpu: 1.5 });
  await h.rt.run(boosted);
  assert.equal(quota(boosted.id), "150000");
  h.rt.endStartupCpu(boosted.id);
  assert.equal(quota(boosted.id), "25000");
  h.rt.endStartupCpu(boosted.id); // once ended, a no-op
  assert.equal(quota(boosted.id), "25000");
  // A boost below the container's own cpu is no boost.
  const low = h.spec(["sleep", "100"], { cpu: 0.5, startupCpu: 0.1 });
  await h.rt.run(low);
  assert.equal(quota(low.id), "50000");
  // Nobody is left to end a boost after a runtime restart: recover ends it.
  const orphan = h.spec(["sleep", "100"], { cpu: 0.25, startupCpu: 1 });
  await h.rt.run(orphan);
  assert.equal(quota(orphan.id), "100000");
  h.rt.close();
  h.rt = h.make();
  const listed = await h.rt.recover();
  assert.equal(quota(orphan.id), "25000");
  assert.equal(listed.find((c) => c.id === orphan.id)?.status, "running");
});

test("stop: SIGKILL after grace for a process ignoring SIGTERM", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(
    py("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready'); time.sleep(100)"),
  );
  await h.rt.run(spec);
  await waitFor(() => h.linesOf(spec.id).includes("ready"), { timeoutMs: 20_000, what: "ready" });
  const info = await h.rt.stop(spec.id, { graceMs: 500 });
  assert.equal(info.status, "stopped");
  assert.equal(info.reason, "killed");
  assert.equal(info.exitCode, 137);
  assert.equal((await h.exitEvent(spec.id)).reason, "killed");
});

test("stop: a process honouring SIGTERM exits normally", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const script = [
    "import signal, sys, time",
    "def bye(*_):",
    "    print('bye'); sys.exit(0)",
    "signal.signal(signal.SIGTERM, bye)",
    "print('ready')",
    "time.sleep(100)",
  ].join("\n");
  const spec = h.spec(py(script));
  await h.rt.run(spec);
  await waitFor(() => h.linesOf(spec.id).includes("ready"), { timeoutMs: 20_000, what: "ready" });
  const info = await h.rt.stop(spec.id, { graceMs: 20_000 });
  assert.equal(info.reason, "exited");
  assert.equal(info.exitCode, 0);
  assert.deepEqual(h.linesOf(spec.id), ["ready", "bye"]);
});

test("a container running past timeoutMs is killed with reason timed_out", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(["sleep", "1000"], { timeoutMs: 500 });
  await h.rt.run(spec);
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.reason, "timed_out");
  assert.equal(exit.exitCode, 137);
});

test("a missing program fails run() with runc's exec error and leaves nothing behind", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(["/nope"]);
  await assert.rejects(h.rt.run(spec), (e: BerthError) => {
    assert.equal(e.code, "failed_precondition");
    assert.match(e.message, /\/nope/);
    assert.match(e.message, /no such file or directory/i);
    return true;
  });
  assert.equal(h.rt.get(spec.id), undefined);
  assert.equal(existsSync(join(h.root, spec.id)), false);
  assert.equal(h.events.length, 0);
});

test("a container crashing during its start-up window fails run() with its stderr", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("import berth_no_such_module"), { startupWindowMs: 20_000 });
  await assert.rejects(h.rt.run(spec), (e: BerthError) => {
    assert.equal(e.code, "failed_precondition");
    assert.match(e.message, /exited with code 1/);
    assert.match(e.message, /ModuleNotFoundError: No module named 'berth_no_such_module'/);
    return true;
  });
  assert.equal(h.rt.get(spec.id), undefined);
  assert.equal(existsSync(join(h.root, spec.id)), false);
});

test("a healthy container passes its start-up window", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("print('up')"), { startupWindowMs: 10_000 });
  const info = await h.rt.run(spec);
  assert.equal(info.status, "stopped");
  assert.equal(info.exitCode, 0);
  assert.deepEqual(
    h.events.filter((e) => e.containerId === spec.id).map((e) => e.type),
    ["start", "exit"],
  );
});

test("seccomp, capabilities and masked paths confine the container", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const script = `
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.personality.argtypes = [ctypes.c_ulong]
def call(f, *a):
    ctypes.set_errno(0)
    r = f(*a)
    return [r, ctypes.get_errno()]
add_key = {"x86_64": 248, "aarch64": 217}[platform.machine()]
out = {
  "add_key": call(libc.syscall, add_key, b"user", b"berth-test", b"x", 1, -3),
  "personality_norandom": call(libc.personality, 0x0040000),
  "personality_query": call(libc.personality, 0xffffffff),
  "mount": call(libc.mount, b"none", b"/mnt", b"tmpfs", 0, None),
  "unshare_user": call(libc.unshare, 0x10000000),
  "capeff": int([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1], 16),
  "timer_list": len(open("/proc/timer_list").read()),
  "sys_firmware": os.listdir("/sys/firmware"),
  "kcore": os.path.getsize("/proc/kcore") if os.path.exists("/proc/kcore") else None,
}
print(json.dumps(out))
`;
  const out = await printedJson(h, script);
  const EPERM = 1;
  // add_key works for unprivileged host processes; only seccomp stops it here.
  assert.deepEqual(out.add_key, [-1, EPERM]);
  assert.deepEqual(out.personality_norandom, [-1, EPERM]);
  assert.equal(out.personality_query[0], 0, "querying the persona stays allowed");
  assert.deepEqual(out.mount, [-1, EPERM]);
  assert.deepEqual(out.unshare_user, [-1, EPERM]);
  const CAP_SYS_ADMIN = 21;
  const CAP_NET_RAW = 13;
  const CAP_MKNOD = 27;
  const CAP_CHOWN = 0;
  assert.equal((BigInt(out.capeff) >> BigInt(CAP_SYS_ADMIN)) & 1n, 0n);
  assert.equal((BigInt(out.capeff) >> BigInt(CAP_NET_RAW)) & 1n, 0n);
  assert.equal((BigInt(out.capeff) >> BigInt(CAP_MKNOD)) & 1n, 0n);
  assert.equal((BigInt(out.capeff) >> BigInt(CAP_CHOWN)) & 1n, 1n);
  assert.equal(out.timer_list, 0, "/proc/timer_list is masked");
  assert.deepEqual(out.sys_firmware, []);
  assert.ok(out.kcore === null || out.kcore === 0, "/proc/kcore is absent or masked");
});

test("the default seccomp allowlist refuses what it does not list with EPERM; ordinary work runs", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const script = `
import ctypes, json, mmap, os, platform, selectors, socket, subprocess, sys, tempfile, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
  "x86_64": {"keyctl": 250, "bpf": 321, "perf_event_open": 298, "kcmp": 312},
  "aarch64": {"keyctl": 219, "bpf": 280, "perf_event_open": 241, "kcmp": 272},
}[platform.machine()]
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(NR[name], *[ctypes.c_long(a) for a in args])
    return [r, ctypes.get_errno()]
pid = os.getpid()
out = {
  # KEYCTL_GET_KEYRING_ID of the session keyring: works for any host process.
  "keyctl": call("keyctl", 0, -3, 0),
  # BPF_MAP_CREATE and perf_event_open with no attributes: EFAULT or EINVAL had the kernel seen them.
  "bpf": call("bpf", 0, 0, 0),
  "perf_event_open": call("perf_event_open", 0, 0, -1, -1, 0),
  # KCMP_FILE of fd 0 with itself: neither allowed nor on the deny list.
  "kcmp": call("kcmp", pid, pid, 0, 0, 0),
}
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    out["vsock"] = 0
except OSError as e:
    out["vsock"] = e.errno

results = []
threads = [threading.Thread(target=lambda i=i: results.append(sum(range(i * 1000)))) for i in range(4)]
for th in threads: th.start()
for th in threads: th.join()
out["threads"] = len(results)

child = subprocess.run([sys.executable, "-c", "import os; print(os.getppid() > 0 and 6 * 7)"], capture_output=True, text=True)
out["subprocess"] = child.stdout.strip()

a, b = socket.socketpair()
sel = selectors.DefaultSelector()
sel.register(b, selectors.EVENT_READ)
a.sendall(b"ping")
ready = sel.select(timeout=5)
out["socketpair"] = b.recv(4).decode() if ready else None
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen()
cli = socket.create_connection(srv.getsockname(), timeout=5)
conn, _ = srv.accept()
cli.sendall(b"pong")
out["tcp"] = conn.recv(4).decode()

with tempfile.NamedTemporaryFile("wb", dir="/tmp", delete=False) as f:
    f.write(b"x" * 8192)
    f.flush()
    os.fsync(f.fileno())
os.rename(f.name, "/tmp/moved")
with open("/tmp/moved", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[0:5] = b"hello"
    m.flush()
    m.close()
out["file"] = open("/tmp/moved", "rb").read(5).decode()
anon = mmap.mmap(-1, 1 << 20)
anon[-3:] = b"end"
out["mmap"] = anon[-3:].decode()
time.sleep(0.01)
out["urandom"] = len(os.urandom(16))
libc.personality.argtypes = [ctypes.c_ulong]
out["personality"] = libc.personality(0xffffffff)
print(json.dumps(out))
`;
  const out = await printedJson(h, script);
  const EPERM = 1;
  assert.deepEqual(out.keyctl, [-1, EPERM]);
  assert.deepEqual(out.bpf, [-1, EPERM]);
  assert.deepEqual(out.perf_event_open, [-1, EPERM]);
  assert.deepEqual(out.kcmp, [-1, EPERM], "a call on neither list gets EPERM, not ENOSYS");
  assert.equal(out.vsock, EPERM);
  assert.equal(out.threads, 4);
  assert.equal(out.subprocess, "42");
  assert.equal(out.socketpair, "ping");
  assert.equal(out.tcp, "pong");
  assert.equal(out.file, "hello");
  assert.equal(out.mmap, "end");
  assert.equal(out.urandom, 16);
  assert.equal(out.personality, 0);
});

test("user, cwd, env, hostname and read-only bind mounts are applied", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const code = join(h.dir, "code");
  mkdirSync(code);
  writeFileSync(join(code, "hello.txt"), "from the host");
  const script = `
import os, socket
print(os.getcwd(), os.getuid(), os.getgid(), socket.gethostname(), os.environ["FOO"])
print(open("/code/hello.txt").read())
try:
    open("/code/new.txt", "w")
except OSError as e:
    print("write", e.errno)
`;
  const spec = h.spec(py(script), {
    cwd: "/tmp",
    user: { uid: 1000, gid: 1000 },
    hostname: "berth-box",
    env: { FOO: "bar" },
    mounts: [{ source: code, destination: "/code", readonly: true }],
  });
  await h.rt.run(spec);
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.exitCode, 0, exit.stderrTail);
  const EROFS = 30;
  assert.deepEqual(h.linesOf(spec.id), ["/tmp 1000 1000 berth-box bar", "from the host", `write ${EROFS}`]);
  assert.deepEqual(readdirSync(code), ["hello.txt"]);
});

test("recover() adopts a running container and resumes its logs from the saved offset", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(
    py("import time, sys\nprint('before')\nsys.stdin.close()\ntime.sleep(1)\nprint('after')\ntime.sleep(60)"),
  );
  const first = await h.rt.run(spec);
  await waitFor(() => h.linesOf(spec.id).includes("before"), { timeoutMs: 20_000, what: "before" });
  h.rt.close(); // the agent goes away; the container must not notice
  h.logs.length = 0;
  h.rt = h.make();
  const listed = await h.rt.recover();
  const again = listed.find((c) => c.id === spec.id);
  assert.equal(again?.status, "running");
  assert.equal(again?.pid, first.pid);
  await waitFor(() => h.linesOf(spec.id).includes("after"), { timeoutMs: 20_000, what: "after" });
  assert.deepEqual(h.linesOf(spec.id), ["after"], "lines read before the restart are not repeated");
  const stopped = await h.rt.stop(spec.id, { graceMs: 0 });
  assert.equal(stopped.reason, "killed");
  await h.rt.delete(spec.id);
  assert.deepEqual(h.rt.list(), []);
});

test("a container outlives a SIGKILLed agent process and is adopted by the next one", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("import time\nfor i in range(600):\n    print('tick', i)\n    time.sleep(0.05)"));
  // The stand-in agent runs under a subreaper so the waiter it orphans is
  // reaped by the test, not left as a zombie of the host's pid 1.
  const wrapper = spawn(
    "python3",
    [
      join(import.meta.dirname, "fixtures/subreaper.py"),
      process.execPath,
      "--import",
      "tsx",
      join(import.meta.dirname, "fixtures/agent-process.ts"),
      h.root,
      h.rootfs,
      spec.id,
      ...spec.args,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let out = "";
  wrapper.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const wrapperGone = new Promise((r) => wrapper.once("exit", r));
  t.after(async () => {
    if (wrapper.exitCode === null && wrapper.signalCode === null) wrapper.kill("SIGKILL");
    await wrapperGone;
  });
  const m = await waitFor(() => /agent (\d+) started (\d+)/.exec(out), {
    timeoutMs: 30_000,
    what: "agent start",
  });
  const [agentPid, pid] = [Number(m[1]), Number(m[2])];
  process.kill(agentPid, "SIGKILL");
  await waitFor(() => !existsSync(`/proc/${agentPid}`), { timeoutMs: 10_000, what: "agent exit" });
  h.rt = h.make();
  const adopted = (await h.rt.recover()).find((c) => c.id === spec.id);
  assert.equal(adopted?.status, "running");
  assert.equal(adopted?.pid, pid);
  // Still writing (no SIGPIPE) and its output reaches the new runtime.
  const seen = h.linesOf(spec.id).length;
  await waitFor(() => h.linesOf(spec.id).length > seen + 5, { timeoutMs: 20_000, what: "more ticks" });
  assert.match(h.linesOf(spec.id).at(-1)!, /^tick \d+$/);
  const stopped = await h.rt.stop(spec.id, { graceMs: 0 });
  assert.equal(stopped.reason, "killed");
});

test("recover() reports a container that exited while the agent was away", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("import time, sys; time.sleep(0.5); print('done'); sys.exit(5)"));
  await h.rt.run(spec);
  h.rt.close();
  await waitFor(() => existsSync(join(h.root, spec.id, "exit-status")), { timeoutMs: 20_000, what: "exit" });
  h.rt = h.make();
  await h.rt.recover();
  const exit = await h.exitEvent(spec.id);
  assert.equal(exit.exitCode, 5);
  assert.equal(exit.reason, "exited");
  assert.deepEqual(h.linesOf(spec.id), ["done"]);
  assert.equal(h.rt.get(spec.id)?.status, "stopped");
});

test("recover() removes bundles runc no longer knows", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(["sleep", "1000"]);
  await h.rt.run(spec);
  h.rt.close();
  // As after a reboot with runc state on tmpfs: the bundle dir outlives runc's record.
  const other = join(h.root, "t-orphan");
  mkdirSync(other);
  writeFileSync(join(other, "meta.json"), "{}");
  h.rt = h.make();
  const listed = await h.rt.recover();
  assert.deepEqual(
    listed.map((c) => c.id),
    [spec.id],
  );
  assert.equal(existsSync(other), false);
  await h.rt.delete(spec.id);
  await h.rt.delete(spec.id); // idempotent
});

test("invalid specs are rejected before anything is created", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ args: [] }, /args must be a non-empty list/],
    [{ cpu: 0 }, /cpu must be a number of cores/],
    [{ cpu: -1 }, /cpu must be a number of cores/],
    [{ memoryBytes: 1024 * 1024 }, /too small.*6 MiB/],
    [{ id: "bad/id" }, /container id "bad\/id" is invalid/],
    [{ id: "" }, /container id "" is invalid/],
    [{ image: { rootfs: join(h.dir, "nope") } }, /image.rootfs .* does not exist/],
    [{ mounts: [{ source: "relative", destination: "/x" }] }, /mounts\[0\].source must be an absolute path/],
    [{ pidsLimit: 0 }, /pidsLimit must be an integer >= 1/],
    [{ startupCpu: 0 }, /startupCpu must be a positive number of cores/],
  ];
  for (const [override, message] of cases) {
    const spec = { ...h.spec(["true"]), ...override };
    await assert.rejects(h.rt.run(spec as never), (e: BerthError) => {
      assert.equal(e.code, "invalid_request");
      assert.match(e.message, message);
      return true;
    });
  }
  const dup = h.spec(["sleep", "100"]);
  await h.rt.run(dup);
  await assert.rejects(h.rt.run(dup), (e: BerthError) => e.code === "conflict");
  await h.rt.delete(dup.id);
  assert.deepEqual(
    readdirSync(h.root).filter((n) => n !== ".runc"),
    [],
  );
});
