// ContainerHost end to end: real registry pull, runc, network namespaces,
// nftables. One host (and one image pull) for the whole file.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { waitFor } from "../../shared/net.ts";
import type { ContainerStatus, LogEntry } from "../../api/index.ts";
import { createOutside, listenIn, randomPort } from "../network/helpers.ts";
import { needs } from "../helpers/env.ts";
import { execAll, HOST_COMMANDS, hostHarness, MiB, PROBE, withTimeout } from "./harness.ts";

const rejectsWith = (code: string, re: RegExp) => (e: unknown) => {
  const err = e as { code?: string; message?: string };
  assert.equal(err.code, code, err.message);
  assert.match(err.message ?? "", re);
  return true;
};

const SLEEP = ["python3", "-c", "import time; time.sleep(600)"];

test("container host", { timeout: 300_000 }, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t);
  const base = { image: h.imageRef, cpu: 0.25, memoryBytes: 128 * MiB };
  const run = (extra: Record<string, unknown>) => h.host.runContainer({ ...base, args: SLEEP, ...extra });
  const collect = async (it: AsyncIterable<LogEntry>) => {
    const out: LogEntry[] = [];
    for await (const e of it) out.push(e);
    return out;
  };
  /** Nothing of `id` is left: no record, lease, in-use mark. */
  const nothingLeftOf = async (id: string) => {
    await assert.rejects(h.host.getContainer(id), rejectsWith("not_found", new RegExp(id)));
    assert.equal(
      h.net.list().find((n) => n.containerId === id),
      undefined,
      "no network lease",
    );
    for (const img of h.images.list()) assert.ok(!img.inUseBy.includes(id), "no image in-use mark");
    assert.ok(!existsSync(join(h.dir, "host", `${id}.json`)), "no host record");
  };

  await t.test("python prints 42 and exits 0", async () => {
    const s = await h.host.runContainer({
      ...base,
      args: ["python3", "-c", "print(42)"],
      labels: { job: "p42" },
    });
    assert.match(s.imageDigest, /^sha256:/);
    assert.ok(s.ipv4, "an address");
    const exit = await h.exitOf(s.id);
    assert.equal(exit.status.exitCode, 0);
    assert.equal(exit.status.reason, "exited");
    assert.equal(exit.status.state, "stopped");
    const lines = await collect(h.host.streamLogs(s.id));
    assert.deepEqual(
      lines.map((l) => [l.stream, l.line]),
      [["stdout", "42"]],
    );
    assert.deepEqual(
      (await h.host.listContainers({ labels: { job: "p42" } })).map((c) => c.id),
      [s.id],
    );
    assert.deepEqual(await h.host.listContainers({ labels: { job: "other" } }), []);
    assert.ok(
      h.logs.some((l) => l.containerId === s.id && l.line === "42"),
      "onLog got the line",
    );
    // Several coordinators may each remove an exited container at once: every remove answers.
    const removes = await Promise.allSettled(
      [0, 1, 2].map(() => h.host.stopContainer(s.id, { remove: true })),
    );
    assert.deepEqual(
      removes.map((r) => (r.status === "rejected" ? String((r.reason as Error).message) : r.value.state)),
      ["stopped", "stopped", "stopped"],
    );
    await nothingLeftOf(s.id);
  });

  await t.test(
    "a workspace's opt-out reaches runc: the deny-list profile for syscallFilter denylist",
    async () => {
      const config = (id: string) =>
        JSON.parse(readFileSync(join(h.dir, "containers", id, "config.json"), "utf8")) as {
          linux: { seccomp: { defaultAction: string } };
        };
      const meta = (id: string) =>
        JSON.parse(readFileSync(join(h.dir, "containers", id, "meta.json"), "utf8")) as {
          spec: { seccomp?: string };
        };
      const out = await h.host.runContainer({
        ...base,
        args: ["python3", "-c", "print(42)"],
        userNamespace: false,
        syscallFilter: "denylist",
      });
      assert.equal((await h.exitOf(out.id)).status.exitCode, 0);
      assert.equal(meta(out.id).spec.seccomp, "denylist", "kept with the container");
      assert.equal(config(out.id).linux.seccomp.defaultAction, "SCMP_ACT_ALLOW", "allow all but a deny list");
      await h.host.stopContainer(out.id, { remove: true });
      const plain = await h.host.runContainer({ ...base, args: ["python3", "-c", "print(42)"] });
      assert.equal((await h.exitOf(plain.id)).status.exitCode, 0);
      assert.equal(meta(plain.id).spec.seccomp, undefined, "absent: the allow list");
      await h.host.stopContainer(plain.id, { remove: true });
      await assert.rejects(
        h.host.runContainer({ ...base, args: SLEEP, syscallFilter: "off" as never }),
        rejectsWith("invalid_request", /syscallFilter must be one of "allowlist", "denylist", got "off"/),
      );
    },
  );

  await t.test("a gang member gets gang0 with its rank's address, the gang's env and labels", async () => {
    const gang = {
      id: "gang-host-test",
      vni: 4000 + (process.pid % 1000),
      rank: 1,
      size: 2,
      hosts: ["203.0.113.7", "192.0.2.1"],
      subnet: "10.251.0.0/24",
      masterPort: 29500,
    };
    const show = [
      "import os",
      "e = os.environ",
      "print(e['RANK'], e['WORLD_SIZE'], e['MASTER_ADDR'], e['NCCL_SOCKET_IFNAME'])",
      // The container's /sys is not its network namespace's: ask the kernel through a socket.
      "import fcntl, socket, struct",
      "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)",
      "q = lambda req: fcntl.ioctl(s.fileno(), req, struct.pack('256s', b'gang0'))",
      "print(struct.unpack('16si', q(0x8921)[:20])[1], socket.inet_ntoa(q(0x8915)[20:24]), q(0x8927)[18:24].hex(':'))",
    ].join("\n");
    const s = await h.host.runContainer({ ...base, args: ["python3", "-c", show], gang });
    assert.equal(s.labels["berth.gang_id"], "gang-host-test");
    assert.equal(s.labels["berth.gang_rank"], "1");
    assert.equal(s.labels["berth.gang_size"], "2");
    const exitCode = (await h.exitOf(s.id)).status.exitCode;
    const lines = (await collect(h.host.streamLogs(s.id))).map((l) => l.line);
    assert.equal(exitCode, 0, lines.join("\n"));
    const mac = `02:${[gang.vni >> 16, (gang.vni >> 8) & 0xff, gang.vni & 0xff].map((b) => b.toString(16).padStart(2, "0")).join(":")}:01:01`;
    // gang0's MTU: that of the link to the other rank's host, less VXLAN's 50 bytes.
    const exec = promisify(execFile);
    const dev = /\bdev (\S+)/.exec((await exec("ip", ["-o", "route", "get", "203.0.113.7"])).stdout)?.[1];
    const mtu =
      Number(JSON.parse((await exec("ip", ["-j", "link", "show", "dev", dev!])).stdout)[0].mtu) - 50;
    assert.deepEqual(lines, ["1 2 10.251.0.1 gang0", `${mtu} 10.251.0.2 ${mac}`]);
    await h.host.stopContainer(s.id, { remove: true });
    await nothingLeftOf(s.id);
    const { stdout } = await promisify(execFile)("ip", ["-o", "link", "show"]);
    assert.doesNotMatch(stdout, new RegExp(`${h.net.options.namePrefix}g[bxv]`), "no gang device left");
    await assert.rejects(
      h.host.runContainer({ ...base, args: SLEEP, gang: { ...gang, rank: 2 } }),
      rejectsWith("invalid_request", /gang\.rank must be an integer 0\.\.1/),
    );
  });

  await t.test("a container over its memory limit is oom_killed", async () => {
    const s = await h.host.runContainer({
      ...base,
      memoryBytes: 64 * MiB,
      args: ["python3", "-c", "b = b'x' * (200 * 1024 * 1024); print(len(b))"],
    });
    const exit = await h.exitOf(s.id);
    assert.equal(exit.status.reason, "oom_killed", JSON.stringify(exit.status));
    await h.host.stopContainer(s.id, { remove: true });
  });

  await t.test("resources the host cannot give are refused with the reason, leaving nothing", async () => {
    const before = (await h.host.listContainers()).length;
    await assert.rejects(
      run({ id: "big-cpu", cpu: 64 }),
      rejectsWith("resource_exhausted", /asked for 64 cores, this host has 2 cores \(2 cores free\)/),
    );
    await assert.rejects(
      run({ id: "big-mem", memoryBytes: 1024 ** 4 }),
      rejectsWith("resource_exhausted", /asked for 1024 GiB of memory, this host has 4 GiB/),
    );
    await assert.rejects(
      run({ id: "gpu", gpu: { count: 1 } }),
      rejectsWith("resource_exhausted", /asked for 1 GPU, this host has none/),
    );
    for (const id of ["big-cpu", "big-mem", "gpu"]) await nothingLeftOf(id);
    assert.equal((await h.host.listContainers()).length, before);
    // Allocations of running containers count: 1.75 + 0.5 cores do not fit in 2.
    const a = await run({ cpu: 1.75 });
    await assert.rejects(
      run({ id: "no-room", cpu: 0.5 }),
      rejectsWith("resource_exhausted", /\(0.25 cores free\)/),
    );
    // Stopping (without remove) frees the allocation; the container stays listed as stopped.
    const stopped = await h.host.stopContainer(a.id, { graceMs: 0 });
    assert.equal(stopped.state, "stopped");
    const b = await run({ cpu: 2 });
    assert.equal((await h.host.getContainer(a.id)).state, "stopped");
    await h.host.stopContainer(a.id, { remove: true });
    await h.host.stopContainer(b.id, { remove: true, graceMs: 0 });
    await nothingLeftOf(a.id);
  });

  await t.test("an invalid allow_list is refused before the image is pulled", async () => {
    await assert.rejects(
      h.host.runContainer({
        ...base,
        id: "bad-egress",
        image: `${h.imageRef.split("/")[0]}/never/pushed:1`,
        args: ["true"],
        egress: { mode: "allow", cidrs: ["10.0.0.0/33"] },
      }),
      rejectsWith("invalid_request", /invalid prefix length "33"/),
    );
    await nothingLeftOf("bad-egress");
  });

  await t.test("mounts only under the allowed roots, symlinks resolved", async () => {
    await assert.rejects(
      run({ id: "mnt-out", mounts: [{ source: "/etc", destination: "/host-etc" }] }),
      rejectsWith(
        "permission_denied",
        /mounts\[0\]\.source \/etc is not allowed: only paths under .*allowed may be mounted/,
      ),
    );
    const link = join(h.allowedRoot, "escape");
    symlinkSync("/etc", link);
    await assert.rejects(
      run({ id: "mnt-link", mounts: [{ source: link, destination: "/x" }] }),
      rejectsWith("permission_denied", /it resolves to \/etc/),
    );
    const data = join(h.allowedRoot, "data");
    mkdirSync(data);
    writeFileSync(join(data, "f.txt"), "mounted\n");
    const s = await h.host.runContainer({
      ...base,
      args: ["cat", "/data/f.txt"],
      mounts: [{ source: data, destination: "/data", readOnly: true }],
    });
    await h.exitOf(s.id);
    assert.deepEqual(
      (await collect(h.host.streamLogs(s.id))).map((l) => l.line),
      ["mounted"],
    );
    await h.host.stopContainer(s.id, { remove: true });
    for (const id of ["mnt-out", "mnt-link"]) await nothingLeftOf(id);
  });

  await t.test("a failure after partial setup undoes everything and says what failed", async () => {
    const leases = h.net.list().length;
    await assert.rejects(
      run({ id: "nope", args: ["/nope"] }),
      rejectsWith("failed_precondition", /container nope: starting the container failed: .*\/nope/s),
    );
    await nothingLeftOf("nope");
    assert.equal(h.net.list().length, leases);
    await assert.rejects(
      run({ id: "dies", args: ["sh", "-c", "echo boom >&2; exit 3"], startupWindowMs: 3000 }),
      rejectsWith("failed_precondition", /exited with code 3.*boom/s),
    );
    await nothingLeftOf("dies");
  });

  await t.test("a pull that fails releases the network attached alongside it", async () => {
    const leases = h.net.list().length;
    await assert.rejects(
      run({ id: "no-image", image: `${h.imageRef.split("/")[0]}/never/pushed:1` }),
      rejectsWith("not_found", /container no-image: pulling the image failed: .*never\/pushed/s),
    );
    await nothingLeftOf("no-image");
    assert.equal(h.net.list().length, leases, "the lease taken in parallel with the pull is gone");
  });

  await t.test("streamLogs: tail, then follow until the container ends", async () => {
    const script = [
      "import os, time",
      "for i in range(5): print(i, flush=True)",
      "while not os.path.exists('/tmp/go'): time.sleep(0.05)",
      "for i in range(5, 8): print(i, flush=True)",
    ].join("\n");
    const s = await run({ args: ["python3", "-c", script] });
    await waitFor(() => h.logs.filter((l) => l.containerId === s.id).length >= 5, {
      timeoutMs: 20_000,
      what: "first lines",
    });
    const ac = new AbortController();
    const following = collect(h.host.streamLogs(s.id, { tail: 2, follow: true, signal: ac.signal }));
    const go = await execAll(await h.host.exec(s.id, { args: ["touch", "/tmp/go"] }));
    assert.equal(go.code, 0, go.stderr);
    const lines = await withTimeout(following, 30_000, "log follow");
    assert.deepEqual(
      lines.map((l) => l.line),
      ["3", "4", "5", "6", "7"],
    );
    assert.equal((await h.host.getContainer(s.id)).exitCode, 0);
    // A follower on a running container ends when the signal aborts.
    const sleeper = await run({});
    const ac2 = new AbortController();
    const f2 = collect(h.host.streamLogs(sleeper.id, { follow: true, signal: ac2.signal }));
    ac2.abort();
    assert.deepEqual(await withTimeout(f2, 10_000, "aborted follow"), []);
    await h.host.stopContainer(s.id, { remove: true });
    await h.host.stopContainer(sleeper.id, { remove: true, graceMs: 0 });
  });

  let survivor: ContainerStatus | undefined;
  await t.test("exec: stdin, exit codes, confinement, kill, tty", async () => {
    const s = await run({ labels: { keep: "yes" } });
    survivor = s;
    const upper = await execAll(
      await h.host.exec(s.id, { args: ["python3", "-c", "import sys; print(sys.stdin.read().upper())"] }),
      "hi",
    );
    assert.deepEqual([upper.stdout, upper.code], ["HI\n", 0]);
    const seven = await execAll(
      await h.host.exec(s.id, { args: ["sh", "-c", "echo err >&2; exit 7"], env: { X: "1" } }),
    );
    assert.deepEqual([seven.stderr, seven.code], ["err\n", 7]);
    const caps = await execAll(
      await h.host.exec(s.id, {
        args: ["grep", "-E", "^(CapEff|CapBnd|NoNewPrivs|Seccomp):", "/proc/self/status"],
      }),
    );
    const field = (name: string) => new RegExp(`^${name}:\\s*(\\S+)`, "m").exec(caps.stdout)?.[1] ?? "";
    const CAP_SYS_ADMIN = 21n;
    for (const f of ["CapEff", "CapBnd"]) {
      assert.equal(
        (BigInt(`0x${field(f)}`) >> CAP_SYS_ADMIN) & 1n,
        0n,
        `${f} must lack CAP_SYS_ADMIN:\n${caps.stdout}`,
      );
    }
    assert.equal(field("NoNewPrivs"), "1");
    assert.equal(field("Seccomp"), "2");
    const env = await execAll(
      await h.host.exec(s.id, {
        args: ["sh", "-c", "echo $X:$(pwd):$(id -u)"],
        env: { X: "y" },
        cwd: "/tmp",
        user: "1000:1000",
      }),
    );
    assert.equal(env.stdout, "y:/tmp:1000\n");
    const long = await h.host.exec(s.id, { args: ["sleep", "60"] });
    // The pid file appears once runc started the process.
    await new Promise((r) => setTimeout(r, 300));
    long.kill();
    assert.equal(await withTimeout(long.exit, 10_000, "killed exec"), 137);
    const tty = await h.host.exec(s.id, {
      // runc sizes the container's terminal asynchronously, at start and on
      // every resize (SIGWINCH), so the shell waits for each, at most 5 s.
      args: [
        "sh",
        "-c",
        [
          'i=0; while [ "$(stty size)" = "0 0" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; stty size',
          "read x",
          'i=0; while [ "$(stty size)" != "30 100" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; stty size',
          "tty",
        ].join("; "),
      ],
      tty: true,
    });
    let out = "";
    const reading = (async () => {
      for await (const c of tty.output) out += new TextDecoder().decode(c.data);
    })();
    await waitFor(() => out.includes("24 80"), { timeoutMs: 10_000, what: "tty size" }).catch((e) => {
      throw new Error(`${(e as Error).message}; output so far: ${JSON.stringify(out)}`);
    });
    tty.resize?.(100, 30);
    tty.writeStdin(new TextEncoder().encode("go\n"));
    assert.equal(await withTimeout(tty.exit, 10_000, "tty exec"), 0);
    await withTimeout(reading, 5000, "tty output");
    assert.match(out, /30 100/);
    assert.match(out, /\/dev\/pts\/\d+/);
    await assert.rejects(
      h.host.exec("missing", { args: ["true"] }),
      rejectsWith("not_found", /container missing/),
    );
  });

  await t.test("egress block, then allow_list switched on the running container", async () => {
    const outside = await createOutside(h.down, h.names);
    const port = randomPort();
    await listenIn(h.down, outside.netns, port, "hello");
    const s = await run({ egress: { mode: "block" } });
    const probe = async () =>
      (
        await execAll(
          await h.host.exec(s.id, { args: ["python3", "-c", PROBE, outside.primary4, String(port)] }),
        )
      ).stdout.trim();
    assert.match(await probe(), /^FAIL/);
    const updated = await h.host.setNetworkPolicy(s.id, { mode: "allow", cidrs: [`${outside.primary4}/32`] });
    assert.deepEqual(updated.egress, { mode: "allow", cidrs: [`${outside.primary4}/32`] });
    assert.equal(await probe(), "OK hello");
    assert.equal((await h.host.getContainer(s.id)).pid, s.pid, "same process, no restart");
    await assert.rejects(
      h.host.setNetworkPolicy(s.id, { mode: "allow", cidrs: ["bad"] }),
      rejectsWith("invalid_request", /not in CIDR notation/),
    );
    await h.host.stopContainer(s.id, { remove: true, graceMs: 0 });
  });

  await t.test("two containers cannot reach each other", async () => {
    const port = 8080;
    const server = [
      "import socket",
      "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
      `s.bind(("0.0.0.0", ${port})); s.listen(4); print("ready", flush=True)`,
      "while True:",
      "    c, _ = s.accept(); c.sendall(b'hi\\n'); c.close()",
    ].join("\n");
    const a = await run({ args: ["python3", "-c", server] });
    const b = await run({});
    await waitFor(() => h.logs.some((l) => l.containerId === a.id && l.line === "ready"), {
      timeoutMs: 20_000,
      what: "server",
    });
    const self = await execAll(
      await h.host.exec(a.id, { args: ["python3", "-c", PROBE, "127.0.0.1", String(port)] }),
    );
    assert.equal(self.stdout.trim(), "OK hi", "the server answers locally");
    const cross = await execAll(
      await h.host.exec(b.id, { args: ["python3", "-c", PROBE, a.ipv4 ?? "", String(port)] }),
    );
    assert.match(cross.stdout, /^FAIL/);
    await h.host.stopContainer(a.id, { remove: true, graceMs: 0 });
    await h.host.stopContainer(b.id, { remove: true, graceMs: 0 });
  });

  await t.test("a restarted host adopts the running container", async () => {
    assert.ok(survivor);
    const host2 = await h.restart();
    const listed = await host2.listContainers({ labels: { keep: "yes" } });
    assert.deepEqual(
      listed.map((c) => [c.id, c.state, c.pid]),
      [[survivor.id, "running", survivor.pid]],
    );
    assert.ok(
      h.images.list().some((i) => i.inUseBy.includes(survivor?.id ?? "")),
      "image in-use mark restored",
    );
    const echo = await execAll(await host2.exec(survivor.id, { args: ["echo", "still here"] }));
    assert.equal(echo.stdout, "still here\n");
    // Its allocation came back: 0.25 of 2 cores are held.
    await assert.rejects(
      run({ id: "after-restart", cpu: 2 }),
      rejectsWith("resource_exhausted", /1.75 cores free/),
    );
    const stopped = await host2.stopContainer(survivor.id, { graceMs: 0, remove: true });
    assert.equal(stopped.state, "stopped");
    await nothingLeftOf(survivor.id);
  });
});
