// The OCI runtime per container (docs/runtime.md, "OCI runtimes"): a gVisor
// container (runsc) sees gVisor's kernel, a runc one the host's; crun runs
// where the host's cgroups allow it and is refused, saying why, where not;
// GPUs under gVisor need runsc's nvproxy.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { detectCgroups } from "../../agent/runtime/cgroups.ts";
import { crunRefusal, ociRuntimeCli, runscHasNvproxy } from "../../agent/runtime/oci-runtimes.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import type { BerthError } from "../../shared/errors.ts";
import { needs } from "../helpers/env.ts";
import { runtimeHarness } from "./harness.ts";

const REQ = { root: true, commands: ["runc", "runsc", "mount", "umount"] };
const hostKernel = () => readFileSync("/proc/version", "utf8").trim();

test("a runsc container sees gVisor's kernel, a runc container the host's", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const gv = h.spec(["cat", "/proc/version"], { runtime: "runsc" });
  const rc = h.spec(["cat", "/proc/version"]);
  const info = await h.rt.run(gv);
  assert.equal(info.runtime, "runsc");
  await h.rt.run(rc);
  assert.equal((await h.exitEvent(gv.id)).exitCode, 0);
  assert.equal((await h.exitEvent(rc.id)).exitCode, 0);
  const [gvisor] = h.linesOf(gv.id);
  const [host] = h.linesOf(rc.id);
  assert.equal(host, hostKernel());
  assert.ok(gvisor, "the gVisor container printed its /proc/version");
  assert.notEqual(gvisor, hostKernel());
  assert.equal(h.rt.get(rc.id)?.runtime, "runc");
  await h.rt.delete(gv.id);
  await h.rt.delete(rc.id);
});

test("a runsc container is stopped, recovered by a new runtime and deleted", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(["sleep", "600"], { runtime: "runsc" });
  await h.rt.run(spec);
  h.rt.close();
  const again = h.make();
  const recovered = await again.recover();
  assert.deepEqual(
    recovered.map((c) => [c.id, c.status, c.runtime]),
    [[spec.id, "running", "runsc"]],
  );
  const stopped = await again.stop(spec.id, { graceMs: 0 });
  assert.equal(stopped.reason, "killed");
  await again.delete(spec.id);
  assert.deepEqual(await new Runc("runsc", again.options.stateRoots.runsc).list(), []);
  again.close();
});

test("crun runs where the host's cgroups allow it and is refused, saying why, where not", async (t) => {
  if (!needs(t, { ...REQ, commands: [...REQ.commands, "crun"] })) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(["cat", "/proc/version"], { runtime: "crun" });
  const why = crunRefusal(detectCgroups());
  if (why) {
    await assert.rejects(h.rt.run(spec), (e: BerthError) => {
      assert.equal(e.code, "failed_precondition");
      assert.match(e.message, /crun cannot run containers on this host: its cgroups are in hybrid mode/);
      return true;
    });
    assert.equal(h.rt.get(spec.id), undefined, "nothing is left of a refused start");
    return;
  }
  await h.rt.run(spec);
  assert.equal((await h.exitEvent(spec.id)).exitCode, 0);
  assert.deepEqual(h.linesOf(spec.id), [hostKernel()]);
  await h.rt.delete(spec.id);
});

test("GPU devices under gVisor need runsc's nvproxy", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  if (runscHasNvproxy("runsc")) {
    // This runsc can pass GPUs through: the refusal below is not reachable here.
    return;
  }
  const spec = h.spec(["true"], {
    runtime: "runsc",
    extraDevices: [{ path: "/dev/nvidia0", type: "c", major: 195, minor: 0 }],
  });
  await assert.rejects(h.rt.run(spec), (e: BerthError) => {
    assert.equal(e.code, "failed_precondition");
    assert.match(e.message, /GPUs under gVisor need runsc's nvproxy/);
    return true;
  });
});

test("crunRefusal reads the cgroup2 mount's controllers of a hybrid host", () => {
  const hybrid = {
    version: 1 as const,
    unifiedMount: "/sys/fs/cgroup/unified",
    controllers: new Map(),
    swapAccounting: false,
  };
  assert.match(String(crunRefusal(hybrid, () => "hugetlb\n")), /hybrid mode .* controllers enabled: hugetlb/);
  assert.equal(
    crunRefusal(hybrid, () => "\n"),
    undefined,
    "a cgroup2 mount without controllers is fine",
  );
  assert.equal(crunRefusal({ ...hybrid, unifiedMount: "" }), undefined, "pure v1");
  assert.equal(crunRefusal({ ...hybrid, version: 2 }), undefined, "pure v2");
});

test("each runtime has its own state root and flags", () => {
  assert.deepEqual(ociRuntimeCli("runc", "runc", "/r/.runc"), {
    name: "runc",
    bin: "runc",
    root: "/r/.runc",
    globalArgs: ["--root", "/r/.runc"],
    keep: true,
    tty: true,
  });
  const gv = ociRuntimeCli("runsc", "/usr/bin/runsc", "/r/.runsc");
  assert.deepEqual(gv.globalArgs, ["--file-access=shared", "--host-uds=open", "--root", "/r/.runsc"]);
  assert.equal(gv.keep, false);
  const argv = new Runc(gv.bin, gv.root, { globalArgs: gv.globalArgs, keep: gv.keep }).waiterArgv({
    bundle: "/b",
    id: "c",
    pidFile: "/b/pid",
    exitFile: "/b/exit",
    logFile: "/b/log",
  });
  assert.deepEqual(argv.slice(4), [
    "/usr/bin/runsc",
    "--file-access=shared",
    "--host-uds=open",
    "--root",
    "/r/.runsc",
    "--log",
    "/b/log",
    "--log-format",
    "json",
    "run",
    "--bundle",
    "/b",
    "--pid-file",
    "/b/pid",
    "c",
  ]);
});
