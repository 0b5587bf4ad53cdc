import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import { GpuWatcher } from "../../agent/capacity/gpu-watcher.ts";
import { GpuUsageReader } from "../../agent/metrics/gpu-usage.ts";
import { isBerthError } from "../../shared/errors.ts";
import { type GpuReport, gpuCounts } from "../../shared/fleet.ts";
import { sleep, waitFor } from "../../shared/net.ts";
import { FIXTURES, fakeBin, fakeEnv, linkTool, listingDevDir } from "./fake-nvidia.ts";

const nodesFor = (gpus: number) => [
  "nvidiactl",
  "nvidia-uvm",
  ...Array.from({ length: gpus }, (_, i) => `nvidia${i}`),
];

type T = Parameters<typeof fakeBin>[0];

function probeFor(t: T, fixture: string, opts: { gpus: number; ctk?: boolean; timeoutMs?: number }) {
  const bin = fakeBin(t, opts.ctk ? ["nvidia-smi", "nvidia-ctk"] : ["nvidia-smi"]);
  const devDir = listingDevDir(t, nodesFor(opts.gpus));
  return new NvidiaGpuProbe({ env: fakeEnv(bin, fixture), devDir, timeoutMs: opts.timeoutMs ?? 10_000 });
}

describe("NvidiaGpuProbe on recorded hosts", () => {
  it("8×H100: eight H100s with driver, CUDA and memory", async (t) => {
    const r = await probeFor(t, "h100x8", { gpus: 8 }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.reason, undefined);
    assert.equal(r.driverVersion, "535.129.03");
    assert.equal(r.cudaVersion, "12.2");
    assert.equal(r.toolkit, false);
    assert.deepEqual(gpuCounts(r), { H100: 8 });
    assert.deepEqual(
      r.devices.map((d) => d.index),
      [0, 1, 2, 3, 4, 5, 6, 7],
    );
    assert.deepEqual(r.devices[7], {
      index: 7,
      uuid: "GPU-1ff13534-2e82-4ce1-958d-003d9a0b2361",
      model: "NVIDIA H100 80GB HBM3",
      type: "H100",
      memoryMiB: 81559,
    });
  });

  it("1×H200, driver 580, CUDA 13.0: the real outputs of an H200 host", async (t) => {
    const r = await probeFor(t, "h200-driver580", { gpus: 1 }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.reason, undefined);
    assert.equal(r.driverVersion, "580.159.04");
    assert.equal(r.cudaVersion, "13.0");
    assert.deepEqual(gpuCounts(r), { H200: 1 });
    assert.deepEqual(r.devices, [
      {
        index: 0,
        uuid: "GPU-be599b92-0f41-e687-3b5b-ed854ce46672",
        model: "NVIDIA H200",
        type: "H200",
        memoryMiB: 143771,
      },
    ]);
  });

  it("1×H200: its usage answer reads as the agent's GPU metrics", async (t) => {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const r = await new GpuUsageReader({ env: fakeEnv(bin, "h200-driver580") }).read();
    assert.notEqual(r, "absent");
    assert.ok(r !== "absent" && r.ok, JSON.stringify(r));
    assert.deepEqual(
      [...r.gpus.entries()],
      [["GPU-be599b92-0f41-e687-3b5b-ed854ce46672", { utilizationPercent: 0, memoryUsedBytes: 0 }]],
    );
  });

  it("1×A10G with the toolkit installed", async (t) => {
    const r = await probeFor(t, "a10g", { gpus: 1, ctk: true }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.toolkit, true);
    assert.equal(r.driverVersion, "535.104.05");
    assert.deepEqual(
      r.devices.map((d) => [d.type, d.model, d.memoryMiB]),
      [["A10G", "NVIDIA A10G", 23028]],
    );
  });

  it("a 4090 box", async (t) => {
    const r = await probeFor(t, "rtx4090x2", { gpus: 2 }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.cudaVersion, "12.4");
    assert.deepEqual(gpuCounts(r), { "4090": 2 });
    assert.equal(r.devices[0]?.memoryMiB, 24564);
  });

  it("A100 with MIG: slices offered, MIG parent not offered whole", async (t) => {
    const r = await probeFor(t, "a100-mig", { gpus: 2 }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.devices.length, 5);
    const migs = r.devices.filter((d) => d.mig);
    assert.deepEqual(
      migs.map((d) => d.mig?.profile),
      ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"],
    );
    assert.ok(
      migs.every((d) => d.index === 0 && d.mig?.parentUuid === "GPU-af5d8bb0-9f2e-4ea4-b658-90e0f94855d0"),
    );
    assert.ok(!r.devices.some((d) => d.uuid === "GPU-af5d8bb0-9f2e-4ea4-b658-90e0f94855d0"));
    assert.deepEqual(
      r.devices.filter((d) => !d.mig).map((d) => [d.index, d.memoryMiB]),
      [[1, 40960]],
    );
  });

  it("a pre-MIG driver (R418) that rejects mig.mode.current", async (t) => {
    const r = await probeFor(t, "v100x2-r418", { gpus: 2 }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.driverVersion, "418.226.00");
    assert.equal(r.cudaVersion, "10.1");
    assert.deepEqual(gpuCounts(r), { V100: 2 });
  });

  it("runs an nvidia-smi given by path, without PATH", async (t) => {
    const devDir = listingDevDir(t, nodesFor(1));
    const probe = new NvidiaGpuProbe({
      nvidiaSmiPath: join(FIXTURES, "nvidia-smi"),
      env: { PATH: "/usr/bin:/bin", BERTH_FAKE_NVIDIA_FIXTURE: "a10g" },
      devDir,
    });
    const r = await probe.probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.devices[0]?.type, "A10G");
  });
});

describe("NvidiaGpuProbe failure reasons", () => {
  it("no driver: nvidia-smi is not on PATH", async (t) => {
    const bin = fakeBin(t, []);
    const r = await new NvidiaGpuProbe({ env: fakeEnv(bin, "h100x8"), devDir: listingDevDir(t, []) }).probe();
    assert.deepEqual(r, {
      available: false,
      reason: "nvidia-smi not found: no NVIDIA driver on this host",
      devices: [],
      toolkit: false,
    });
  });

  it("no driver, toolkit present: still unavailable, toolkit reported", async (t) => {
    const bin = fakeBin(t, ["nvidia-ctk"]);
    const r = await new NvidiaGpuProbe({ env: fakeEnv(bin, "h100x8"), devDir: listingDevDir(t, []) }).probe();
    assert.equal(r.available, false);
    assert.equal(r.toolkit, true);
    assert.equal(r.reason, "nvidia-smi not found: no NVIDIA driver on this host");
  });

  it("an explicit nvidia-smi path that does not exist is named", async (t) => {
    const missing = join(fakeBin(t, []), "nvidia-smi");
    const r = await new NvidiaGpuProbe({ nvidiaSmiPath: missing, devDir: listingDevDir(t, []) }).probe();
    assert.equal(r.reason, `nvidia-smi not found at ${missing}: no NVIDIA driver on this host`);
  });

  it("driver error: the driver's own text and exit status", async (t) => {
    const r = await probeFor(t, "driver-error", { gpus: 8 }).probe();
    assert.equal(r.available, false);
    assert.deepEqual(r.devices, []);
    assert.equal(
      r.reason,
      "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " +
        "Make sure that the latest NVIDIA driver is installed and running.",
    );
  });

  it("driver loaded, no GPUs", async (t) => {
    const r = await probeFor(t, "no-devices", { gpus: 0 }).probe();
    assert.equal(r.reason, "nvidia-smi failed (exit 6): No devices were found");
  });

  it("a hung driver: nvidia-smi does not answer in time", async (t) => {
    const r = await probeFor(t, "hung", { gpus: 1, timeoutMs: 1_000 }).probe();
    assert.equal(r.available, false);
    assert.equal(r.reason, "nvidia-smi did not answer within 1s: the NVIDIA driver may be hung");
  });

  it("missing device nodes are named; present ones are not", async (t) => {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const devDir = listingDevDir(t, [
      "nvidiactl",
      "nvidia0",
      "nvidia1",
      "nvidia2",
      "nvidia3",
      "nvidia4",
      "nvidia5",
      "nvidia7",
    ]);
    const r = await new NvidiaGpuProbe({ env: fakeEnv(bin, "h100x8"), devDir }).probe();
    assert.equal(r.available, false);
    assert.deepEqual(r.devices, []);
    assert.equal(r.driverVersion, "535.129.03", "what is known of the driver is still reported");
    assert.match(
      r.reason ?? "",
      new RegExp(`^NVIDIA device nodes missing: ${devDir}/nvidia-uvm, ${devDir}/nvidia6 \\(`),
    );
    assert.doesNotMatch(r.reason ?? "", /nvidia0|nvidiactl/);
  });

  it("MIG enabled without instances: nothing to offer, and why", async (t) => {
    const r = await probeFor(t, "a100-mig-empty", { gpus: 1 }).probe();
    assert.equal(r.available, false);
    assert.match(
      r.reason ?? "",
      /^MIG is enabled on GPU 0 \(NVIDIA A100-SXM4-40GB\) but no MIG instances exist/,
    );
  });

  it("bad options are refused at construction", () => {
    assert.throws(
      () => new NvidiaGpuProbe({ devDir: "dev" }),
      (e) => isBerthError(e) && /devDir/.test(e.message),
    );
    assert.throws(
      () => new NvidiaGpuProbe({ timeoutMs: 0 }),
      (e) => isBerthError(e) && /timeoutMs/.test(e.message),
    );
  });
});

describe("GpuWatcher", () => {
  it("picks up a driver installed after start, and stops cleanly", async (t) => {
    const bin = fakeBin(t, []);
    const devDir = listingDevDir(t, nodesFor(1));
    const probe = new NvidiaGpuProbe({ env: fakeEnv(bin, "a10g"), devDir });
    const changes: GpuReport[] = [];
    const errors: unknown[] = [];
    const watcher = new GpuWatcher({
      probe,
      intervalMs: 50,
      onChange: (r) => changes.push(r),
      onError: (e) => errors.push(e),
    });
    t.after(() => watcher.stop());

    const first = await watcher.start();
    assert.equal(first?.available, false);
    assert.equal(first?.reason, "nvidia-smi not found: no NVIDIA driver on this host");
    assert.equal(changes.length, 1, "the first report counts as a change");

    // Several probes pass with the same answer and raise no change.
    await sleep(200);
    assert.equal(changes.length, 1);

    linkTool(bin, "nvidia-smi");
    const installed = await waitFor(() => changes.find((r) => r.available), {
      timeoutMs: 15_000,
      what: "the watcher to see the new driver",
    });
    assert.equal(installed.devices[0]?.type, "A10G");
    assert.equal((await watcher.probe()).available, true, "probe() answers from the latest report");

    await watcher.stop();
    const seen = changes.length;
    rmSync(join(bin, "nvidia-smi"));
    await sleep(300);
    assert.equal(changes.length, seen, "no probe runs after stop()");
    assert.equal(watcher.current?.available, true);
    assert.deepEqual(errors, []);
  });

  it("reports a probe that throws and keeps its last report", async () => {
    let calls = 0;
    const good: GpuReport = { available: false, reason: "x", toolkit: false, devices: [] };
    const errors: unknown[] = [];
    const watcher = new GpuWatcher({
      probe: {
        probe: async () => {
          calls++;
          if (calls > 1) throw new Error("boom");
          return good;
        },
      },
      intervalMs: 20,
      onError: (e) => errors.push(e),
    });
    await watcher.start();
    await waitFor(() => errors.length >= 2, { timeoutMs: 5_000, what: "two failed probes" });
    await watcher.stop();
    assert.deepEqual(watcher.current, good);
    assert.match(String(errors[0]), /boom/);
  });

  it("refuses a bad interval", () => {
    assert.throws(
      () =>
        new GpuWatcher({
          probe: { probe: async () => ({ available: false, toolkit: false, devices: [] }) },
          intervalMs: -1,
        }),
      /intervalMs/,
    );
  });
});
