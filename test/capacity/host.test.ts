import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statfsSync, statSync } from "node:fs";
import { availableParallelism, cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import { nearestExistingPath, readDiskCapacity, readHostCapacity } from "../../agent/capacity/host.ts";
import { isBerthError } from "../../shared/errors.ts";
import type { GpuReport } from "../../shared/fleet.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { fakeBin, fakeEnv, listingDevDir } from "./fake-nvidia.ts";

const noGpu: GpuReport = { available: false, reason: "test host", toolkit: false, devices: [] };

describe("readHostCapacity on this machine", () => {
  it("reports logical cores, total memory and the data directory's disk", async (t) => {
    const dataDir = tempDir(t, "berth-capacity-");
    const c = await readHostCapacity({ dataDir, gpu: { probe: async () => noGpu } });
    assert.equal(c.cpuCores, availableParallelism());
    assert.equal(c.cpuCores, cpus().length);
    assert.equal(c.memoryBytes, totalmem());
    assert.ok(c.disk.totalBytes > 0, "disk total is positive");
    assert.ok(c.disk.freeBytes > 0, "disk free is positive");
    assert.ok(c.disk.freeBytes <= c.disk.totalBytes, "free never exceeds total");
    // The mount named is the filesystem the directory is on, and its size is that filesystem's.
    assert.equal(statSync(c.disk.path).dev, statSync(dataDir).dev);
    const fs = statfsSync(dataDir);
    assert.equal(c.disk.totalBytes, fs.blocks * fs.bsize);
    assert.deepEqual(c.gpus, noGpu);
  });

  it("measures the nearest existing parent of a data directory not made yet", async (t) => {
    const base = tempDir(t, "berth-capacity-");
    const dataDir = join(base, "not", "made", "yet");
    assert.equal(nearestExistingPath(dataDir), base);
    const disk = await readDiskCapacity(dataDir);
    assert.equal(statSync(disk.path).dev, statSync(base).dev);
    assert.ok(!existsSync(dataDir), "measuring does not create the directory");
  });

  it("names the right filesystem when it is a tmpfs", async (t) => {
    if (!needs(t, { root: true, commands: ["mount", "umount"] })) return;
    // A tmpfs of the test's own, so the check does not depend on how the host mounts /dev/shm.
    const dir = mkdtempSync(join(tmpdir(), "berth-tmpfs-"));
    const mnt = join(dir, "mnt");
    mkdirSync(mnt);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=16m", "berth-test", mnt]);
    t.after(() => {
      execFileSync("umount", [mnt]);
      rmSync(dir, { recursive: true, force: true });
    });
    const disk = await readDiskCapacity(join(mnt, "berth-not-made"));
    assert.equal(disk.path, mnt);
    const fs = statfsSync(mnt);
    assert.equal(disk.totalBytes, fs.blocks * fs.bsize);
    assert.equal(disk.totalBytes, 16 * 1024 * 1024);
    assert.ok(disk.freeBytes <= disk.totalBytes);
  });

  it("carries the GPU probe's report", async (t) => {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const gpu = new NvidiaGpuProbe({
      env: fakeEnv(bin, "a10g"),
      devDir: listingDevDir(t, ["nvidiactl", "nvidia-uvm", "nvidia0"]),
    });
    const c = await readHostCapacity({ dataDir: tempDir(t), gpu });
    assert.equal(c.gpus.available, true, c.gpus.reason);
    assert.equal(c.gpus.devices[0]?.type, "A10G");
  });

  it("refuses an empty data directory", async () => {
    await assert.rejects(
      readHostCapacity({ dataDir: "", gpu: { probe: async () => noGpu } }),
      (e) => isBerthError(e) && e.code === "invalid_request",
    );
  });
});
