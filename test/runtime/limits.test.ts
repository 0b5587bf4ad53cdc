// A container's disk quota (agent/runtime/disk.ts) and the limits a failed
// task is judged by (ContainerRuntime.limits): the disk fills at its quota,
// not the host's; refused forks are counted; every mount, loop device and
// image goes with the container, also when a restarted runtime finds a
// container that is gone.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import { ContainerRuntime } from "../../agent/runtime/runtime.ts";
import { resolveContainerRuntimeOptions } from "../../agent/runtime/options.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { MIN_CONTAINER_DISK_BYTES, parseContainerDisk } from "../../cli/commands/agent.ts";
import { MIN_DISK_BYTES } from "../../agent/runtime/disk.ts";
import { needs } from "../helpers/env.ts";
import { loopsUnder } from "../helpers/loops.ts";
import { py, runtimeHarness } from "./harness.ts";

const MiB = 1024 * 1024;
const REQ = { root: true, commands: ["runc", "mount", "umount", "mkfs.ext4", "losetup"] };

const FILL = py(
  [
    "import errno, time",
    "n = 0",
    "try:",
    "    with open('/fill', 'wb') as f:",
    "        while True:",
    "            f.write(b'x' * (1 << 20)); f.flush(); n += 1",
    "except OSError as e:",
    "    print('wrote', n, 'MiB', errno.errorcode[e.errno], flush=True)",
    "time.sleep(60)",
  ].join("\n"),
);

test("a container's disk is its quota: it fills at the quota with ENOSPC, limits() says full, delete leaves nothing", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t, { diskBytes: 32 * MiB });
  const spec = h.spec(FILL);
  await h.rt.run(spec);
  const bundle = join(h.root, spec.id);
  assert.equal(loopsUnder(h.dir).length, 1, "one loop device backs the container's disk");
  const line = await waitFor(() => h.linesOf(spec.id)[0], { timeoutMs: 30_000, what: "the fill report" });
  const m = /^wrote (\d+) MiB ENOSPC$/.exec(line);
  assert.ok(m, line);
  assert.ok(Number(m[1]) >= 20 && Number(m[1]) < 32, `filled the 32 MiB disk, not the host's: ${line}`);
  // The host holds what the container wrote, not more: the image is sparse and bounded.
  const du = Number(
    execFileSync("du", ["-sk", join(bundle, "disk", "disk.img")], { encoding: "utf8" }).split("\t")[0],
  );
  assert.ok(du * 1024 <= 33 * MiB, `the image takes ${du} KiB of the host's disk`);
  const limits = h.rt.limits(spec.id);
  assert.equal(limits?.disk?.sizeBytes, 32 * MiB);
  assert.equal(limits?.disk?.full, true, JSON.stringify(limits));
  assert.equal(limits?.pids.refused, 0);
  await h.rt.delete(spec.id);
  assert.equal(existsSync(bundle), false, "the bundle dir (and the image in it) is removed");
  assert.deepEqual(mountsUnder(h.dir), []);
  assert.deepEqual(loopsUnder(h.dir), [], "its loop device is detached");
});

test("a container with room left is not full; diskBytes 0 runs without a quota", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const quota = h.spec(["sleep", "60"]);
  await h.rt.run(quota);
  const l = h.rt.limits(quota.id);
  assert.equal(l?.disk?.sizeBytes, 50 * 1024 * MiB, "the default quota is 50 GiB");
  assert.equal(l?.disk?.full, false);
  const bare = await runtimeHarness(t, { diskBytes: 0 });
  const spec = bare.spec(["sleep", "60"]);
  await bare.rt.run(spec);
  assert.equal(bare.rt.limits(spec.id)?.disk, undefined);
  assert.ok(existsSync(join(bare.root, spec.id, "upper")), "the upper dir lies in the bundle");
  assert.equal(existsSync(join(bare.root, spec.id, "disk")), false);
  assert.equal(h.rt.limits("no-such-container"), undefined);
  assert.throws(() => resolveContainerRuntimeOptions({ root: h.root, diskBytes: MiB }), /at least 16 MiB/);
});

test("limits() counts the forks the pids cgroup refused", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const script = [
    "import os, time",
    "try:",
    "    for i in range(16):",
    "        if os.fork() == 0:",
    "            time.sleep(60); os._exit(0)",
    "except OSError as e:",
    "    print('refused', e.errno, flush=True)",
    "time.sleep(60)",
  ].join("\n");
  const spec = h.spec(py(script), { pidsLimit: 4 });
  await h.rt.run(spec);
  assert.equal(
    await waitFor(() => h.linesOf(spec.id)[0], { timeoutMs: 20_000, what: "the fork report" }),
    "refused 11",
  );
  const l = h.rt.limits(spec.id);
  assert.equal(l?.pids.limit, 4);
  assert.equal(l?.pids.refused, 1);
  assert.equal(h.rt.pidsRefused(spec.id), 1);
});

test("a restarted runtime keeps an adopted container's disk and removes a gone container's", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t, { diskBytes: 64 * MiB });
  const kept = h.spec(["sleep", "60"]);
  const gone = h.spec(["sleep", "60"]);
  await h.rt.run(kept);
  await h.rt.run(gone);
  assert.equal(loopsUnder(h.dir).length, 2);
  assert.deepEqual(
    readdirSync(h.root).filter((n) => n.startsWith(".disk-template")),
    [],
    "the template scratch image is deleted once read",
  );
  h.rt.close();
  // A killed agent left the template it was formatting.
  writeFileSync(join(h.root, ".disk-template.999999.img"), "");
  // The container vanished while no agent ran (its runc state removed): its disk is stale.
  await new Runc("runc", join(h.root, ".runc")).deleteForce(gone.id);
  h.rt = h.make();
  await h.rt.recover();
  assert.equal(h.rt.get(kept.id)?.status, "running");
  assert.equal(
    h.rt.limits(kept.id)?.disk?.sizeBytes,
    64 * MiB,
    "the adopted container keeps its mounted disk",
  );
  assert.equal(h.rt.get(gone.id), undefined);
  assert.equal(existsSync(join(h.root, gone.id)), false, "the stale bundle and image are removed");
  assert.deepEqual(
    loopsUnder(h.dir).map((l) => l.includes(kept.id)),
    [true],
    "only the adopted container's loop device is left",
  );
  assert.ok(readdirSync(h.root).includes(kept.id));
  assert.equal(
    existsSync(join(h.root, ".disk-template.999999.img")),
    false,
    "a killed agent's template is removed",
  );
});

test("the agent's --container-disk: a size or 0, bad values named", () => {
  assert.equal(parseContainerDisk("50Gi"), 50 * 1024 * MiB);
  assert.equal(parseContainerDisk("512"), 512 * MiB, "a plain number is MiB");
  assert.equal(parseContainerDisk("0"), 0, "no quota");
  assert.throws(() => parseContainerDisk("lots"), /--container-disk "lots" is not a size/);
  assert.throws(
    () => parseContainerDisk("5Mi"),
    /--container-disk "5Mi" must be 0 \(no quota\) or at least 16Mi/,
  );
  assert.equal(
    MIN_CONTAINER_DISK_BYTES,
    MIN_DISK_BYTES,
    "the CLI and the runtime agree on the smallest quota",
  );
  assert.equal(resolveAgentOptions({}).containerDiskBytes, 50 * 1024 * MiB, "50 GiB by default");
  assert.equal(resolveAgentOptions({ containerDiskBytes: 0 }).containerDiskBytes, 0);
  assert.throws(
    () => resolveAgentOptions({ containerDiskBytes: 8 * MiB }),
    /--container-disk must be 0 \(no quota\) or at least 16 MiB/,
  );
});

test("disks made ahead of demand: a start takes a ready one, a restarted runtime takes them back, drain removes them", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t, { diskBytes: 48 * MiB, diskPoolSize: 2 });
  const pool = join(h.root, ".disk-pool");
  /** The pool's disks that are mounted (made and ready). */
  const ready = () =>
    existsSync(pool) ? readdirSync(pool).filter((n) => mountsUnder(join(pool, n)).length > 0) : [];
  const first = h.spec(["sleep", "60"]);
  await h.rt.run(first);
  const made = await waitFor(() => (ready().length === 2 ? ready() : undefined), {
    timeoutMs: 30_000,
    what: "two disks made ahead of demand",
  });
  const second = h.spec(["sh", "-c", "head -c 1048576 /dev/zero > /big && echo wrote && sleep 60"]);
  await h.rt.run(second);
  assert.equal(
    await waitFor(() => h.linesOf(second.id)[0], { timeoutMs: 20_000, what: "the write" }),
    "wrote",
  );
  // One of the ready disks is now the container's: the mount moved with its directory.
  const taken = made.filter((n) => !ready().includes(n));
  assert.equal(taken.length, 1, "the start took a ready disk");
  assert.deepEqual(mountsUnder(join(h.root, second.id, "disk")), [join(h.root, second.id, "disk", "mnt")]);
  assert.equal(h.rt.limits(second.id)?.disk?.sizeBytes, 48 * MiB);
  await waitFor(() => (ready().length === 2 ? true : undefined), {
    timeoutMs: 30_000,
    what: "the pool refilled",
  });
  // A restarted runtime takes the ready disks back instead of leaving them mounted for nobody.
  const before = ready();
  h.rt.close();
  h.rt = h.make();
  await h.rt.recover();
  assert.deepEqual(ready().sort(), before.sort(), "the ready disks are kept");
  const third = h.spec(["sleep", "60"]);
  await h.rt.run(third);
  assert.equal(
    before.filter((n) => !ready().includes(n)).length,
    1,
    "the restarted runtime hands one of them out",
  );
  // One of another size is not taken back: it makes its own (recover starts the refill).
  await waitFor(() => (ready().length === 2 ? true : undefined), {
    timeoutMs: 30_000,
    what: "the pool refilled",
  });
  const old = ready();
  h.rt.close();
  h.rt = new ContainerRuntime({ root: h.root, diskBytes: 32 * MiB, diskPoolSize: 2 });
  await h.rt.recover();
  assert.deepEqual(
    old.filter((n) => existsSync(join(pool, n))),
    [],
    "disks of another size are removed",
  );
  const small = h.spec(["sleep", "60"]);
  await h.rt.run(small);
  assert.equal(h.rt.limits(small.id)?.disk?.sizeBytes, 32 * MiB);
  await waitFor(() => (ready().length === 2 ? true : undefined), {
    timeoutMs: 30_000,
    what: "the pool refilled",
  });
  await h.rt.drainDisks();
  assert.deepEqual(readdirSync(pool), [], "drained: no ready disk is left");
  assert.equal(loopsUnder(pool).length, 0);
});
