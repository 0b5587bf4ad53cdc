// Fault cases on one real `berth up` cluster (coordinator, agent, nats-server,
// runc containers) whose agent gives each container a 128 MiB disk
// (`berth up --container-disk 128Mi`), one after the other — a container's
// disk filled, its pids exhausted, it OOM-killed: the task ends with the
// precise reason, the host is unaffected:
//  - a task that runs its container out of memory ends FAILED oom_killed;
//  - a task that exhausts its container's pids limit ends FAILED
//    pids_exhausted (error PidsExhausted naming the limit);
//  - a task that writes into its root filesystem until ENOSPC ends FAILED
//    disk_full (error DiskFull naming the 128 MiB), and the host's disk holds
//    no more than the quota of it.
// After each: the agent is still ready, the next task answers, and the
// container is gone with its disk (mount, loop device, image). Each case
// prints its summary line (test/faults/summary.ts).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { type BerthUp, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { loopsUnder } from "../helpers/loops.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown } from "../network/helpers.ts";
import { type TaskRow, agentReady, containers, seen, tasksOf } from "./cluster.ts";
import { assertFaultSummary, tallyTasks } from "./summary.ts";

const MiB = 2 ** 20;
const DISK_MIB = 128;

// Calls sit under the main guard: the runner imports this module in the container.
const APP = `
import json, sys
from berth import function

@function(cpu=0.25, memory=128, retries=0)
def double(x):
    return {"x": x, "y": 2 * x}

@function(cpu=0.25, memory=64, retries=0)
def hog():
    blocks = []
    while True:
        blocks.append(b"x" * (8 << 20))

@function(cpu=0.25, memory=512, retries=0)
def threads():
    # Starts threads until the container's pids limit refuses one; they end with the task.
    import threading
    stop = threading.Event()
    try:
        while True:
            threading.Thread(target=stop.wait, daemon=True).start()
    finally:
        stop.set()

@function(cpu=0.25, memory=256, retries=0)
def fill():
    # Writes into the container's root filesystem (not /tmp, a tmpfs) until the disk refuses more.
    n = 0
    try:
        with open("/var/tmp/fill", "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
                f.flush()
                n += 1
    except OSError as e:
        raise OSError(e.errno, f"{e.strerror} after {n} MiB") from e

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "one":
        print("one:", json.dumps(double.remote(21)))
    else:
        fn = {"hog": hog, "threads": threads, "fill": fill}[case]
        try:
            fn.remote()
            print(case + ": returned")
        except Exception as e:
            print(case + ":", type(e).__name__, str(e).splitlines()[0])
`;

/**
 * The host is unaffected: the agent still reports ready, the next task
 * answers, and the task's container is gone with its disk (the agent
 * replaces a container that hit a limit).
 */
async function hostUnaffected(up: BerthUp, row: TaskRow | undefined): Promise<void> {
  assert.ok(await agentReady(up), "the agent is still ready");
  assert.match(await up.python(["app.py", "one"]), /^one: \{"x": 21, "y": 42\}$/m);
  const id = row?.container_id;
  assert.ok(id, "the task names its container");
  const bundle = join(up.dataDir, "agent", "containers", id);
  await waitUntil(() => !existsSync(bundle) || undefined, {
    what: `container ${id} to be removed with its disk`,
    timeoutMs: 60_000,
  });
  assert.deepEqual(mountsUnder(bundle), [], "no mount of the container is left");
  assert.deepEqual(
    loopsUnder(up.dataDir).filter((l) => l.includes(`/${id}/`)),
    [],
    "no loop device of it is left",
  );
}

test("fault suite on a berth up cluster: a container out of memory, pids and disk", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "losetup", "mkfs.ext4"] })) return;
  const td = new Teardown(t);
  let home = "";
  // Deferred before the cluster, so it runs after it is gone: no container disk may outlive it.
  td.defer(() => {
    if (!home) return;
    const left = loopsUnder(home);
    for (const m of mountsUnder(home)) execFileSync("umount", ["-l", m], { stdio: "ignore" });
    assert.deepEqual(left, [], "no loop device of the cluster may be left");
  });
  const up = await startBerthUp(td, ["--container-disk", `${DISK_MIB}Mi`]);
  home = up.home;
  writeFileSync(join(up.appDir, "app.py"), APP);

  await t.test("a task that runs its container out of memory ends FAILED oom_killed", async (st) => {
    const out = await up.python(["app.py", "hog"]);
    assert.match(out, /^hog: RemoteError OutOfMemory: the container ran out of memory/m, out);
    const rows = tasksOf(up, "hog");
    assert.equal(rows.length, 1);
    assert.equal(rows[0]?.status, "FAILED");
    assert.equal(rows[0]?.final_reason, "oom_killed");
    assert.match(rows[0]?.error_json ?? "", /"OutOfMemory"/);
    const c = ((await containers(up)) ?? []).find((x) => x.id === rows[0]?.container_id);
    if (c) assert.equal(c.reason, "oom_killed");
    await hostUnaffected(up, rows[0]);
    assertFaultSummary(st, "container OOM", tallyTasks(seen(rows)));
  });

  await t.test(
    "a task that exhausts its container's pids ends FAILED pids_exhausted naming the limit",
    async (st) => {
      const out = await up.python(["app.py", "threads"]);
      assert.match(
        out,
        /^threads: RemoteError PidsExhausted: the container reached its pids limit of 4096: the kernel refused \d+ fork\(s\) or thread\(s\) while the task ran; the task raised RuntimeError: can't start new thread$/m,
        out,
      );
      const rows = tasksOf(up, "threads");
      assert.equal(rows.length, 1);
      assert.equal(rows[0]?.status, "FAILED");
      assert.equal(rows[0]?.final_reason, "pids_exhausted");
      // The user's own traceback stays with the error.
      assert.match(
        JSON.parse(rows[0]?.error_json ?? "{}").traceback ?? "",
        /threading.*\n(.*\n)*RuntimeError/,
      );
      await hostUnaffected(up, rows[0]);
      assertFaultSummary(st, "container pids exhausted", tallyTasks(seen(rows)));
    },
  );

  await t.test(
    `a task that fills its container's disk ends FAILED disk_full; the host's disk holds at most the ${DISK_MIB} MiB quota`,
    async (st) => {
      const hostFree = () => {
        const s = statfsSync(up.dataDir);
        return s.bavail * s.bsize;
      };
      const freeBefore = hostFree();
      const out = await up.python(["app.py", "fill"]);
      const m = new RegExp(
        `^fill: RemoteError DiskFull: the container's disk of ${DISK_MIB} MiB is full \\(\\d+(\\.\\d+)? MiB free\\); the task raised OSError: \\[Errno 28\\] No space left on device after (\\d+) MiB$`,
        "m",
      ).exec(out);
      assert.ok(m, out);
      const wrote = Number(m[2]);
      assert.ok(
        wrote > DISK_MIB / 2 && wrote <= DISK_MIB,
        `the task wrote ${wrote} MiB: its quota, not the host's disk`,
      );
      // Other work shares this machine's disk: the bound is loose, but a write past the quota would
      // only stop at the host's own ENOSPC.
      assert.ok(
        freeBefore - hostFree() < 1024 * MiB,
        "the host's disk lost no more than the quota and slack",
      );
      const rows = tasksOf(up, "fill");
      assert.equal(rows.length, 1);
      assert.equal(rows[0]?.status, "FAILED");
      assert.equal(rows[0]?.final_reason, "disk_full");
      assert.match(rows[0]?.error_json ?? "", /"DiskFull"/);
      await hostUnaffected(up, rows[0]);
      assertFaultSummary(st, "container disk full", tallyTasks(seen(rows)));
    },
  );
});
