// The sandbox process server (agent/host/sandbox-init.ts, init-exec.ts,
// sdk/python/berth/runtime/sandbox_init.py) on real runc containers. A process the
// server started has the container's pid 1 as its parent; one runc exec
// started has a parent outside the container's pid namespace, so its PPID
// reads 0: that is how each test tells which path ran.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { SANDBOX_INIT_LABEL, SandboxInits } from "../../agent/host/sandbox-init.ts";
import { KEEP_ALIVE_ARGS, SandboxLabels } from "../../coordinator/sandboxes/request.ts";
import { waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import { execAll, HOST_COMMANDS, hostHarness, MiB, withTimeout } from "./harness.ts";

const PPID = ["sh", "-c", "echo $PPID"];

test("sandbox process server", { timeout: 300_000 }, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t);
  const base = { image: h.imageRef, cpu: 0.25, memoryBytes: 128 * MiB };
  const initDir = (id: string) => join(h.dir, "host", "sandbox-init", id);
  const sandbox = async (extra: Record<string, unknown> = {}) => {
    const s = await h.host.runContainer({
      ...base,
      args: KEEP_ALIVE_ARGS,
      labels: { [SANDBOX_INIT_LABEL]: "1" },
      ...extra,
    });
    await waitFor(() => existsSync(join(initDir(s.id), "init.sock")), {
      timeoutMs: 20_000,
      intervalMs: 20,
      what: `the process server of ${s.id}`,
    });
    return s;
  };
  const run = async (id: string, args: string[], extra: Record<string, unknown> = {}, stdin?: string) =>
    execAll(await h.host.exec(id, { args, ...extra }), stdin);

  assert.equal(SandboxLabels.init, SANDBOX_INIT_LABEL, "the coordinator asks with the label the agent reads");
  const s = await sandbox();

  await t.test("processes run through the server: output, stdin, exit codes, env, cwd, user", async () => {
    assert.deepEqual(await run(s.id, PPID), { stdout: "1\n", stderr: "", code: 0 });
    assert.deepEqual(await run(s.id, ["sh", "-c", "echo out; echo err >&2; exit 7"]), {
      stdout: "out\n",
      stderr: "err\n",
      code: 7,
    });
    const upper = await run(s.id, ["python3", "-c", "import sys; print(sys.stdin.read().upper())"], {}, "hi");
    assert.deepEqual([upper.stdout, upper.code], ["HI\n", 0]);
    const env = await run(s.id, ["sh", "-c", "echo $X:$(pwd):$(id -u):$(id -g):$PPID"], {
      env: { X: "y" },
      cwd: "/tmp",
      user: "1000:1000",
    });
    assert.equal(env.stdout, "y:/tmp:1000:1000:1\n");
    const big = await run(s.id, ["python3", "-c", "import sys; sys.stdout.write('x' * 3_000_000)"]);
    assert.deepEqual([big.stdout.length, big.code], [3_000_000, 0]);
  });

  await t.test("the server's processes are confined like runc exec's", async () => {
    const caps = await run(s.id, [
      "grep",
      "-E",
      "^(CapEff|CapBnd|NoNewPrivs|Seccomp|PPid):",
      "/proc/self/status",
    ]);
    const field = (name: string) => new RegExp(`^${name}:\\s*(\\S+)`, "m").exec(caps.stdout)?.[1] ?? "";
    assert.equal(field("PPid"), "1", caps.stdout + caps.stderr);
    const CAP_SYS_ADMIN = 21n;
    for (const f of ["CapEff", "CapBnd"]) {
      assert.equal((BigInt(`0x${field(f)}`) >> CAP_SYS_ADMIN) & 1n, 0n, `${f}: ${caps.stdout}`);
    }
    assert.equal(field("NoNewPrivs"), "1");
    assert.equal(field("Seccomp"), "2");
    // The socket is the agent's only: a process in the container is turned away.
    const inside = await run(s.id, [
      "python3",
      "-c",
      [
        "import json, socket, struct",
        "s = socket.socket(socket.AF_UNIX)",
        "try:",
        "  s.connect('/berth/init/init.sock')",
        "  req = json.dumps({'args': ['true']}).encode()",
        "  s.sendall(b'S' + struct.pack('>I', len(req)) + req)",
        "  print('answer', repr(s.recv(10)))",
        "except OSError as e:",
        "  print('refused', e.errno)",
      ].join("\n"),
    ]);
    assert.match(inside.stdout, /^(answer b''|refused \d+)\n$/, inside.stdout + inside.stderr);
  });

  await t.test("kill with a signal reports 128+signo", async () => {
    const long = await h.host.exec(s.id, { args: ["sleep", "60"] });
    long.kill();
    assert.equal(await withTimeout(long.exit, 10_000, "killed exec"), 137);
    const term = await h.host.exec(s.id, { args: ["sleep", "60"] });
    term.kill("SIGTERM");
    assert.equal(await withTimeout(term.exit, 10_000, "terminated exec"), 143);
  });

  await t.test("many processes at once", async () => {
    const all = await Promise.all(
      Array.from({ length: 24 }, (_, i) => run(s.id, ["sh", "-c", `sleep 0.3; echo ${i}:$PPID`])),
    );
    assert.deepEqual(
      all.map((r) => [r.stdout, r.code]),
      Array.from({ length: 24 }, (_, i) => [`${i}:1\n`, 0]),
    );
  });

  await t.test("a missing command or cwd fails as runc exec reports it", async () => {
    const plain = await h.host.runContainer({ ...base, args: ["sleep", "600"] });
    for (const extra of [{}, { cwd: "/no/such/dir" }]) {
      const viaServer = await run(s.id, ["no-such-command"], extra);
      const viaRunc = await run(plain.id, ["no-such-command"], extra);
      assert.equal(viaRunc.code, 255);
      assert.equal(viaServer.code, viaRunc.code);
      const msg = (e: string) => /msg="(.*)"/.exec(e)?.[1];
      assert.ok(msg(viaRunc.stderr), viaRunc.stderr);
      assert.equal(msg(viaServer.stderr), msg(viaRunc.stderr));
    }
    await h.host.stopContainer(plain.id, { graceMs: 0, remove: true });
  });

  await t.test("runc exec when there is no server: tty, no label, no python3, socket gone", async () => {
    const tty = await h.host.exec(s.id, { args: PPID, tty: true });
    let out = "";
    for await (const c of tty.output) out += new TextDecoder().decode(c.data);
    assert.equal(await withTimeout(tty.exit, 10_000, "tty exec"), 0);
    assert.match(out, /^0\r?\n/);

    const unlabelled = await h.host.runContainer({ ...base, args: KEEP_ALIVE_ARGS });
    assert.equal((await run(unlabelled.id, PPID)).stdout, "0\n");
    assert.ok(!existsSync(initDir(unlabelled.id)));
    // python3 is not on this image's PATH as the container sees it: the requested args stay pid 1.
    const noPython = await h.host.runContainer({
      ...base,
      args: ["/bin/sleep", "600"],
      env: { PATH: "/usr/local/bin" },
      labels: { [SANDBOX_INIT_LABEL]: "1" },
    });
    assert.deepEqual(await run(noPython.id, ["/bin/sh", "-c", "echo $PPID; /bin/cat /proc/1/comm"]), {
      stdout: "0\nsleep\n",
      stderr: "",
      code: 0,
    });
    const gone = await sandbox();
    rmSync(join(initDir(gone.id), "init.sock"));
    assert.deepEqual(await run(gone.id, PPID), { stdout: "0\n", stderr: "", code: 0 });
    for (const c of [unlabelled, noPython, gone])
      await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
  });

  await t.test("after an agent restart the server is used again", async () => {
    const host2 = await h.restart();
    assert.equal((await execAll(await host2.exec(s.id, { args: PPID }))).stdout, "1\n");
  });

  await t.test(
    "stop: SIGTERM reaches the server's processes, the container exits 0, its directory goes",
    async () => {
      const trapper = await h.host.exec(s.id, {
        args: ["sh", "-c", 'trap "echo got-term; exit 3" TERM; echo ready; sleep 600 & wait'],
      });
      let text = "";
      const reading = (async () => {
        for await (const c of trapper.output) text += new TextDecoder().decode(c.data);
        return text;
      })();
      // sh prints once its trap is set.
      await waitFor(() => text.includes("ready"), { timeoutMs: 10_000, intervalMs: 20, what: "the trap" });
      const stopped = await h.host.stopContainer(s.id, { graceMs: 20_000 });
      assert.deepEqual([stopped.exitCode, stopped.reason], [0, "exited"]);
      assert.equal(await withTimeout(trapper.exit, 10_000, "trapped exec"), 3);
      assert.equal(await withTimeout(reading, 10_000, "trapped output"), "ready\ngot-term\n");
      await h.host.stopContainer(s.id, { remove: true });
      assert.ok(!existsSync(initDir(s.id)), "the socket directory is removed with the container");
    },
  );
});

test("a new sandbox's first exec waits for its process server, later ones and others do not", async (t) => {
  if (!needs(t, { root: true })) return;
  const dir = mkdtempSync(join(tmpdir(), "berth-inits-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const layer = join(dir, "layer");
  mkdirSync(join(layer, "usr", "bin"), { recursive: true });
  writeFileSync(join(layer, "usr", "bin", "python3"), "", { mode: 0o755 });
  const inits = new SandboxInits(join(dir, "inits"));
  const spec = (id: string, labels: Record<string, string>) => ({
    id,
    image: { rootfs: [layer] },
    args: ["sleep", "infinity"],
    cpu: 0.25,
    memoryBytes: 128 * MiB,
    labels,
  });
  assert.equal(inits.prepare(spec("with-server", { [SANDBOX_INIT_LABEL]: "1" }), "/sdk"), true);
  assert.equal(inits.prepare(spec("no-label", {}), "/sdk"), false);

  // The server listens 100 ms after the first exec asks: the exec waits for it.
  const socket = inits.socketOf("with-server");
  setTimeout(() => writeFileSync(socket, ""), 100);
  const t0 = Date.now();
  await inits.listening("with-server", 10_000);
  const waited = Date.now() - t0;
  assert.ok(existsSync(socket) && waited >= 90 && waited < 5_000, `waited ${waited} ms`);

  // Only the first exec waits: with the socket gone, the next one returns at once (runc exec follows).
  rmSync(socket);
  const t1 = Date.now();
  await inits.listening("with-server", 10_000);
  assert.ok(Date.now() - t1 < 1_000);
  const t2 = Date.now();
  await inits.listening("no-label", 10_000);
  assert.ok(Date.now() - t2 < 1_000, "a container without a server never waits");

  // A server that never listens holds its first exec only for the given time.
  assert.equal(inits.prepare(spec("silent", { [SANDBOX_INIT_LABEL]: "1" }), "/sdk"), true);
  const t3 = Date.now();
  await inits.listening("silent", 200);
  const held = Date.now() - t3;
  assert.ok(held >= 190 && held < 5_000, `held ${held} ms`);
});
