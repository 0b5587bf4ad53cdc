// Shared GPUs on the agent: which GPUs `--shared-gpus` marks, whether the
// MPS control daemon runs, the MPS client settings a container on a shared
// GPU gets (env and mounts, as units with fixtures and a fake /proc), the
// refusals where MPS is unavailable, and the pick of a shared GPU by memory.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import { GpuInjector } from "../../agent/capacity/gpu-injection.ts";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import {
  markShared,
  mpsClientInjection,
  mpsDaemonState,
  mpsPaths,
  mpsThreadPercentage,
  parseSharedGpus,
  requireMpsControl,
} from "../../agent/capacity/mps.ts";
import { Allocations, pickGpus } from "../../agent/host/allocations.ts";
import { newHostRecord, recordStatus } from "../../agent/host/records.ts";
import { resolveRunRequest } from "../../agent/host/request.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { isBerthError } from "../../shared/errors.ts";
import type { GpuDevice, GpuReport } from "../../shared/fleet.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { fakeBin, fakeEnv, listingDevDir, mknodDevDir, nvidiaNodes } from "./fake-nvidia.ts";

async function probed(
  t: TestContext,
  fixture: string,
  gpus: number,
  shared: "all" | number[],
): Promise<GpuReport> {
  const bin = fakeBin(t, ["nvidia-smi"]);
  const names = ["nvidiactl", "nvidia-uvm", ...Array.from({ length: gpus }, (_, i) => `nvidia${i}`)];
  const r = await new NvidiaGpuProbe({
    env: fakeEnv(bin, fixture),
    devDir: listingDevDir(t, names),
    sharedGpus: shared,
  }).probe();
  assert.equal(r.available, true, r.reason);
  return r;
}

/** An MPS directory, and a /proc where pid 4242 is (or is not) the control daemon. */
function mpsHost(t: TestContext, daemon: "running" | "gone" | "other" | "none") {
  const root = tempDir(t, "berth-mps-");
  const paths = mpsPaths(join(root, "mps"));
  for (const d of Object.values(paths)) mkdirSync(d, { recursive: true });
  const proc = join(root, "proc");
  if (daemon !== "none") writeFileSync(join(paths.pipe, "nvidia-cuda-mps-control.pid"), "4242\n");
  if (daemon === "running" || daemon === "other") {
    mkdirSync(join(proc, "4242"), { recursive: true });
    const argv = daemon === "running" ? ["nvidia-cuda-mps-control", "-d"] : ["sleep", "60"];
    writeFileSync(join(proc, "4242", "cmdline"), `${argv.join("\0")}\0`);
  }
  return { dir: join(root, "mps"), paths, proc };
}

describe("shared GPUs: selection, MPS, client settings", () => {
  it("parses --shared-gpus and --mps-dir", () => {
    const o = resolveAgentOptions({ sharedGpus: "0,1", mpsDir: "/srv/mps" });
    assert.deepEqual([o.sharedGpus, o.mpsDir], [[0, 1], "/srv/mps"]);
    const none = resolveAgentOptions({});
    assert.deepEqual([none.sharedGpus, none.mpsDir], [undefined, "/run/berth/mps"]);
    assert.throws(() => resolveAgentOptions({ sharedGpus: "first" }), /--shared-gpus must be "all"/);
    assert.equal(parseSharedGpus("all"), "all");
    assert.deepEqual(parseSharedGpus("3, 1,1"), [1, 3]);
    for (const bad of ["", "gpu0", "0,", "-1", "0;1"]) {
      assert.throws(() => parseSharedGpus(bad), /--shared-gpus must be "all" or GPU indexes/, bad);
    }
  });

  it("the probe marks the selected whole GPUs shared, never a MIG slice", async (t) => {
    const h100 = await probed(t, "h100x8", 8, [0, 1]);
    assert.deepEqual(
      h100.devices.filter((d) => d.shared).map((d) => d.index),
      [0, 1],
    );
    const mig = await probed(t, "a100-mig", 2, "all");
    assert.deepEqual(
      mig.devices.map((d) => [d.index, d.mig?.profile ?? "whole", d.shared ?? false]),
      [
        [0, "3g.20gb", false],
        [0, "2g.10gb", false],
        [0, "1g.5gb", false],
        [0, "1g.5gb", false],
        [1, "whole", true],
      ],
    );
    assert.deepEqual(markShared(h100.devices, undefined), h100.devices);
  });

  it("knows whether the MPS control daemon runs, and says why not", (t) => {
    const running = mpsHost(t, "running");
    assert.deepEqual(mpsDaemonState(running.paths.pipe, running.proc), { running: true, pid: 4242 });
    const none = mpsHost(t, "none");
    const s1 = mpsDaemonState(none.paths.pipe, none.proc);
    assert.ok(
      !s1.running &&
        /no MPS control daemon runs for .*nvidia-cuda-mps-control\.pid is missing/.test(s1.reason),
    );
    const gone = mpsHost(t, "gone");
    const s2 = mpsDaemonState(gone.paths.pipe, gone.proc);
    assert.ok(!s2.running && /\(pid 4242\) is not running/.test(s2.reason));
    const other = mpsHost(t, "other");
    const s3 = mpsDaemonState(other.paths.pipe, other.proc);
    assert.ok(!s3.running && /pid 4242 of .* is not nvidia-cuda-mps-control/.test(s3.reason));
  });

  it("a client gets its GPU by UUID, its memory limit and thread share, the pipes and MPS's /dev/shm", async (t) => {
    const gpu = (await probed(t, "h200-driver580", 1, "all")).devices[0]!;
    const host = mpsHost(t, "running");
    const inj = mpsClientInjection(gpu, 8192, host.paths, mpsDaemonState(host.paths.pipe, host.proc));
    assert.deepEqual(inj.env, {
      CUDA_VISIBLE_DEVICES: gpu.uuid,
      CUDA_MPS_PIPE_DIRECTORY: "/tmp/nvidia-mps",
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=8192M",
      // 8192 of 143771 MiB is 5.7%: rounded up.
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: "6",
    });
    assert.deepEqual(
      inj.mounts.map((m) => [m.source, m.destination, m.options.includes("rw")]),
      [
        [host.paths.pipe, "/tmp/nvidia-mps", true],
        [host.paths.shm, "/dev/shm", true],
      ],
    );
    assert.equal(mpsThreadPercentage(1, 143771), 1);
    assert.equal(mpsThreadPercentage(143771, 143771), 100);
  });

  it("refuses where MPS is unavailable, a GPU that is not shared, and a share larger than the GPU", async (t) => {
    const gpu = (await probed(t, "h200-driver580", 1, "all")).devices[0]!;
    const none = mpsHost(t, "none");
    assert.throws(
      () => mpsClientInjection(gpu, 8192, none.paths, mpsDaemonState(none.paths.pipe, none.proc)),
      (e) =>
        isBerthError(e) &&
        e.code === "failed_precondition" &&
        /GPU 0 is shared but NVIDIA MPS is not available: no MPS control daemon runs/.test(e.message),
    );
    const running = { running: true as const, pid: 1 };
    const { shared: _, ...unshared } = gpu;
    assert.throws(() => mpsClientInjection(unshared, 8192, none.paths, running), /is not shared/);
    assert.throws(
      () => mpsClientInjection(gpu, 200_000, none.paths, running),
      /does not fit GPU 0 \(143771 MiB\)/,
    );

    // At start: no nvidia-cuda-mps-control on PATH, no shared GPUs.
    const empty = tempDir(t, "berth-nompsbin-");
    assert.throws(
      () => requireMpsControl(empty),
      (e) =>
        isBerthError(e) &&
        /--shared-gpus needs NVIDIA MPS, but nvidia-cuda-mps-control is not on PATH/.test(e.message),
    );
    const fake = join(empty, "nvidia-cuda-mps-control");
    writeFileSync(fake, "#!/bin/sh\nexit 0\n");
    chmodSync(fake, 0o755);
    assert.equal(requireMpsControl(empty), fake);
  });

  it("the injector adds the MPS client to a shared GPU's nodes, or refuses it without a daemon", async (t) => {
    if (!needs(t, { root: true, commands: ["mknod"] })) return;
    const gpu = (await probed(t, "h200-driver580", 1, "all")).devices[0]!;
    const devDir = mknodDevDir(t, nvidiaNodes(1));
    const injector = (host: ReturnType<typeof mpsHost>) =>
      new GpuInjector({
        strategy: "agent",
        env: { PATH: `${fakeBin(t, ["nvidia-smi"])}:/usr/bin:/bin` },
        devDir,
        mpsDir: host.dir,
        procDir: host.proc,
        listLibraries: async () => "",
      });
    const host = mpsHost(t, "running");
    const inj = await injector(host).inject([gpu], { sharedMemoryMiB: 16384 });
    assert.deepEqual(
      inj.devices.map((d) => d.path),
      ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia0"],
    );
    assert.equal(inj.env["NVIDIA_VISIBLE_DEVICES"], gpu.uuid);
    assert.equal(inj.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=16384M");
    assert.equal(inj.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "12");
    assert.deepEqual(
      inj.mounts.map((m) => m.destination),
      ["/usr/bin/nvidia-smi", "/tmp/nvidia-mps", "/dev/shm"],
    );
    await assert.rejects(
      injector(mpsHost(t, "gone")).inject([gpu], { sharedMemoryMiB: 16384 }),
      (e) =>
        isBerthError(e) && e.code === "failed_precondition" && /NVIDIA MPS is not available/.test(e.message),
    );
    await assert.rejects(injector(host).inject([gpu]), /a shared GPU is given alone, with the memory share/);
  });
});

describe("the agent picks a shared GPU by memory", () => {
  it("best fit among the shared GPUs; whole requests never take one", async (t) => {
    const r = await probed(t, "h100x8", 8, [0, 1]);
    const alloc = new Allocations();
    const uuid = (i: number) => r.devices.find((d) => d.index === i)!.uuid;
    const take = (id: string, mib: number, types?: string[]): GpuDevice => {
      const [g] = pickGpus(
        r,
        { count: 1, ...(types ? { types } : {}), memoryMiB: mib },
        alloc.heldGpus(),
        alloc.sharedGpuUse(),
      );
      alloc.hold(id, { cpu: 0, memoryBytes: 0, gpus: [g!.uuid], gpuMemoryMiB: mib });
      return g!;
    };
    assert.equal(take("a", 30_000).index, 0);
    assert.equal(take("b", 40_000, ["H100"]).index, 0);
    assert.equal(take("c", 20_000).index, 1, "GPU 0 has 11559 MiB left");
    assert.equal(take("d", 10_000).index, 0, "the tightest fit");
    assert.deepEqual(
      [...alloc.sharedGpuUse()],
      [
        [uuid(0), 80_000],
        [uuid(1), 20_000],
      ],
    );
    assert.throws(
      () => take("e", 70_000),
      (e) =>
        isBerthError(e) &&
        e.code === "resource_exhausted" &&
        /asked for 68\.36 GiB of a shared GPU, this host's shared GPUs have H100 0: 1\.52 GiB free of 79\.65 GiB, H100 1: 60\.12 GiB free of 79\.65 GiB/.test(
          e.message,
        ),
    );
    // Whole GPUs: the six unshared ones, never 0 or 1, even when all are free.
    const whole = pickGpus(r, { count: 6 }, new Set());
    assert.deepEqual(
      whole.map((d) => d.index),
      [2, 3, 4, 5, 6, 7],
    );
    assert.throws(() => pickGpus(r, { count: 7, types: ["H100"] }, new Set()), /H100: 6 \(6 free\)/);
  });

  it("a host without shared GPUs refuses a share, naming the option", async (t) => {
    const r = await probed(t, "h100x8", 8, []);
    assert.throws(
      () => pickGpus(r, { count: 1, memoryMiB: 1024 }, new Set()),
      /asked for 1 GiB of a shared GPU, this host shares no GPU \(berth agent --shared-gpus\)/,
    );
  });

  it("the run request carries the share, for one GPU only", () => {
    const base = { cpu: 1, memoryBytes: 1024 ** 3, args: ["true"] };
    assert.deepEqual(
      resolveRunRequest({ ...base, gpu: { count: 1, types: ["H100"], memoryMiB: 8192 } }).gpu,
      {
        count: 1,
        types: ["H100"],
        memoryMiB: 8192,
      },
    );
    assert.throws(
      () => resolveRunRequest({ ...base, gpu: { count: 2, memoryMiB: 8192 } }),
      /gpu\.memoryMiB asks for part of one shared GPU: gpu\.count must be 1, got 2/,
    );
    assert.throws(() => resolveRunRequest({ ...base, gpu: { count: 1, memoryMiB: 0 } }), /gpu\.memoryMiB/);
  });

  it("the container's record keeps its share, and its status tells the coordinator", async (t) => {
    const gpu = (await probed(t, "h200-driver580", 1, "all")).devices[0]!;
    const req = resolveRunRequest({
      cpu: 1,
      memoryBytes: 1024 ** 3,
      args: ["true"],
      gpu: { count: 1, memoryMiB: 8192 },
    });
    const image = { ref: "img", digest: "sha256:00" } as never;
    const net = { policy: { mode: "open" }, ipv4: "10.209.0.2", ipv6: "fd00::2" } as never;
    const record = newHostRecord(req, image, [gpu], net);
    const status = recordStatus(record, undefined);
    assert.deepEqual([status.gpus, status.gpuMemoryMiB], [[gpu.uuid], 8192]);
    // The allocation read back from the record at an agent restart holds the same share.
    const alloc = new Allocations();
    alloc.hold(record.id, { ...record, gpuMemoryMiB: record.request.gpu?.memoryMiB });
    assert.deepEqual([...alloc.sharedGpuUse()], [[gpu.uuid, 8192]]);
    const whole = recordStatus(
      newHostRecord(resolveRunRequest({ cpu: 1, memoryBytes: 1024 ** 3, args: ["true"] }), image, [], net),
      undefined,
    );
    assert.equal("gpuMemoryMiB" in whole, false);
  });
});
