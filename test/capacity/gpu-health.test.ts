// GPU telemetry and health from recorded and written nvidia-smi outputs and
// kernel logs: the telemetry table (the H200's figures, "[N/A]" values, a GPU
// lost from the bus), XID lines from /dev/kmsg records, and which GPUs are
// drained and when they come back.

import assert from "node:assert/strict";
import { appendFileSync, copyFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { GpuHealth, GpuMonitor } from "../../agent/capacity/gpu-health.ts";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import {
  GPU_TELEMETRY_ARGS,
  GpuTelemetryReader,
  normalizePciBusId,
  parseTelemetryCsv,
  type TelemetryTable,
} from "../../agent/capacity/gpu-telemetry.ts";
import { GpuWatcher, withoutDrained } from "../../agent/capacity/gpu-watcher.ts";
import { describeXid, KernelLogXidReader, parseKmsg, type XidEvent } from "../../agent/capacity/xid.ts";
import { tempDir } from "../helpers/env.ts";
import { FIXTURES, fakeBin, fakeEnv, listingDevDir } from "./fake-nvidia.ts";

const KMSG = join(FIXTURES, "..", "kmsg", "h100x8-xid.txt");
const fixture = (dir: string, file: string) => readFileSync(join(FIXTURES, dir, file), "utf8");
const H100_3 = "GPU-b37523a5-3b4a-4ee2-8463-513755ac0ecd";
const H100_5 = "GPU-683447c1-0cc8-4f11-9d4e-abbd1fcfb980";
const BOOT = Date.parse("2026-11-26T08:00:00.000Z");

describe("telemetry table", () => {
  test("the H200's figures, each field where the query puts it", () => {
    const { gpus, unreachable } = parseTelemetryCsv(fixture("h200-driver580", "telemetry.csv"));
    assert.deepEqual(unreachable, []);
    assert.deepEqual(gpus, [
      {
        index: 0,
        uuid: "GPU-be599b92-0f41-e687-3b5b-ed854ce46672",
        model: "NVIDIA H200",
        pciBusId: "00000000:00:06.0",
        utilizationPercent: 0,
        memoryUtilizationPercent: 0,
        memoryUsedMiB: 0,
        memoryTotalMiB: 143771,
        temperatureC: 36,
        memoryTemperatureC: 42,
        powerWatts: 80.12,
        smClockMHz: 1980,
        memoryClockMHz: 3201,
        eccCorrectedVolatile: 0,
        eccUncorrectedVolatile: 0,
      },
    ]);
    // Its figures agree with what the real host's plain nvidia-smi printed.
    const header = fixture("h200-driver580", "smi.txt");
    assert.match(header, /36C\s+P0\s+80W \/\s+700W\s+\|\s+0MiB \/ 143771MiB/);
  });

  test("[N/A] reads as null; a value asking for a reset is a problem", () => {
    const { gpus } = parseTelemetryCsv(fixture("h100x8", "telemetry.csv"));
    assert.equal(gpus.length, 8);
    const six = gpus[6]!;
    assert.equal(six.utilizationPercent, null);
    assert.equal(six.powerWatts, null);
    assert.equal(six.eccUncorrectedVolatile, null);
    assert.equal(six.memoryUsedMiB, 4);
    assert.equal(gpus[3]!.eccUncorrectedVolatile, 1);
    const reset = parseTelemetryCsv(
      "2, GPU-5e6a0a2e-dd70-434d-81d7-7cffb7decc0c, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, [GPU requires reset], 0, 4, 81559, 31, 38, 71.03, 345, 2619, 0, 0\n",
    );
    assert.equal(reset.gpus[0]!.problem, 'the driver answers "GPU requires reset"');
    assert.throws(
      () => parseTelemetryCsv("0, GPU-x, NVIDIA H100\n"),
      /telemetry line 1 has 3 columns, expected 15/,
    );
  });

  test("a GPU lost from the bus is named, and the others still read (fake nvidia-smi exits 15)", async (t) => {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const r = await new GpuTelemetryReader({ env: fakeEnv(bin, "h100x8-lost") }).read();
    assert.ok(r !== "absent" && r.ok, JSON.stringify(r));
    assert.equal(r.gpus.length, 7);
    assert.deepEqual(r.unreachable, [
      { pciBusId: "0000:AB:00.0", message: "GPU is lost. Reboot the system to recover this GPU" },
    ]);
    assert.equal(await new GpuTelemetryReader({ env: { PATH: "/nonexistent" } }).read(), "absent");
    assert.equal(GPU_TELEMETRY_ARGS.length, 2);
  });

  test("bus ids in every spelling compare equal", () => {
    for (const id of ["00000000:5D:00.0", "0000:5d:00", "5d:00.0", "0000:5D:00.1"]) {
      assert.equal(normalizePciBusId(id), "0000:5d:00", id);
    }
    assert.equal(normalizePciBusId("not a bus"), undefined);
  });
});

describe("XID errors from the kernel log", () => {
  test("kmsg records: only XID lines, with the GPU's bus and the wall time", () => {
    const events = parseKmsg(readFileSync(KMSG, "utf8"), BOOT);
    assert.deepEqual(
      events.map((e) => [e.pciBusId, e.code, e.at]),
      [
        ["0000:18:00", 13, BOOT + 86170],
        ["0000:5d:00", 48, BOOT + 86170],
      ],
    );
    assert.match(events[1]!.text, /^Xid \(PCI:0000:5d:00\): 48, pid=48377/);
    assert.equal(describeXid(79), "XID 79 (GPU has fallen off the bus)");
    assert.equal(describeXid(31), "XID 31");
  });

  test("the reader returns what was logged since its last read", (t) => {
    const path = join(tempDir(t, "berth-kmsg-"), "kmsg");
    copyFileSync(KMSG, path);
    const reader = new KernelLogXidReader({ path, bootMs: BOOT });
    t.after(() => reader.close());
    assert.equal(reader.read().length, 2);
    assert.deepEqual(reader.read(), []);
    appendFileSync(
      path,
      "4,1600,90000000,-;NVRM: Xid (PCI:0000:ab:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n",
    );
    assert.deepEqual(
      reader.read().map((e) => [e.pciBusId, e.code]),
      [["0000:ab:00", 79]],
    );
  });

  test("a kernel log it may not read throws, naming the file", () => {
    const reader = new KernelLogXidReader({ path: "/nonexistent/kmsg" });
    assert.throws(() => reader.read(), /nonexistent\/kmsg/);
  });
});

describe("GPU health", () => {
  const table = (): TelemetryTable => parseTelemetryCsv(fixture("h100x8", "telemetry.csv"));
  const xids = (): XidEvent[] => parseKmsg(readFileSync(KMSG, "utf8"), BOOT);

  test("a fatal XID drains its GPU; a non-fatal one only counts; the GPU returns after the hold, healthy", () => {
    let now = BOOT + 90_000;
    const health = new GpuHealth({ holdMs: 60_000, clock: () => now });
    assert.equal(health.observe(table(), xids()), true);
    assert.deepEqual(health.drained(), [
      {
        index: 3,
        uuid: H100_3,
        model: "NVIDIA H100 80GB HBM3",
        reason: "XID 48 (double-bit ECC error) logged by the driver",
        since: BOOT + 86170,
        xid: 48,
      },
    ]);
    const annotated = health.annotate(table().gpus);
    assert.deepEqual(annotated[0]!.lastXid, { code: 13, at: BOOT + 86170 });
    assert.equal(annotated[0]!.drained, undefined);
    assert.deepEqual(annotated[3]!.drained, { reason: health.drained()[0]!.reason, since: BOOT + 86170 });

    // Healthy answers within the hold change nothing.
    now = BOOT + 86170 + 59_999;
    assert.equal(health.observe(table(), []), false);
    now = BOOT + 86170 + 60_000;
    assert.equal(health.observe(table(), []), true);
    assert.deepEqual(health.drained(), []);
  });

  test("a GPU the driver cannot reach, or no longer lists, is drained until it answers again", () => {
    const now = BOOT;
    const health = new GpuHealth({ clock: () => now });
    health.observe(table(), []);
    const lost = parseTelemetryCsv(fixture("h100x8-lost", "telemetry.csv"));
    assert.equal(health.observe(lost, []), true);
    assert.deepEqual(
      health.drained().map((d) => [d.index, d.uuid, d.reason]),
      [[5, H100_5, "the driver cannot reach it: GPU is lost. Reboot the system to recover this GPU"]],
    );
    const gone = { gpus: lost.gpus, unreachable: [] };
    const other = new GpuHealth({ clock: () => now });
    other.observe(table(), []);
    other.observe(gone, []);
    assert.match(other.drained()[0]!.reason, /no longer lists it/);
    assert.equal(health.observe(table(), []), true);
    assert.deepEqual(health.drained(), []);
  });

  test("the watcher offers every device but the drained GPU's, which it lists with the reason", async (t) => {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const env = fakeEnv(bin, "h100x8");
    const devDir = listingDevDir(t, [
      "nvidiactl",
      "nvidia-uvm",
      ...Array.from({ length: 8 }, (_, i) => `nvidia${i}`),
    ]);
    const kmsg = join(tempDir(t, "berth-kmsg-"), "kmsg");
    copyFileSync(KMSG, kmsg);
    const xidReader = new KernelLogXidReader({ path: kmsg, bootMs: BOOT });
    t.after(() => xidReader.close());
    const changes: string[][] = [];
    let watcher: GpuWatcher | undefined;
    const monitor = new GpuMonitor({
      telemetry: new GpuTelemetryReader({ env }),
      xids: xidReader,
      health: new GpuHealth({ clock: () => BOOT + 90_000 }),
      onChange: (drained) => {
        changes.push(drained.map((d) => d.uuid));
        watcher?.reassess();
      },
    });
    watcher = new GpuWatcher({
      probe: new NvidiaGpuProbe({ env, devDir }),
      drained: () => monitor.drained(),
    });
    t.after(() => watcher?.stop());
    assert.equal((await watcher.refresh())?.devices.length, 8);

    const r = await monitor.read();
    assert.ok(r !== "absent" && r.ok);
    assert.deepEqual(changes, [[H100_3]]);
    const report = await watcher.probe();
    assert.equal(report.available, true);
    assert.equal(report.devices.length, 7);
    assert.ok(!report.devices.some((d) => d.uuid === H100_3));
    assert.deepEqual(
      report.drained?.map((d) => [d.index, d.reason]),
      [[3, "XID 48 (double-bit ECC error) logged by the driver"]],
    );
  });

  test("the probe keeps offering the GPUs that answer when one is lost", async (t) => {
    const bin = fakeBin(t, ["nvidia-smi"]);
    const devDir = listingDevDir(t, [
      "nvidiactl",
      "nvidia-uvm",
      ...Array.from({ length: 8 }, (_, i) => `nvidia${i}`),
    ]);
    const r = await new NvidiaGpuProbe({ env: fakeEnv(bin, "h100x8-lost"), devDir }).probe();
    assert.equal(r.available, true, r.reason);
    assert.equal(r.devices.length, 7);
    assert.ok(!r.devices.some((d) => d.uuid === H100_5));
  });

  test("a drained GPU takes its MIG slices with it; an unavailable report stays as it is", () => {
    const drained = [{ index: 0, uuid: "GPU-p", model: "A100", reason: "XID 79", since: 1 }];
    const mig = (uuid: string, parent: string) => ({
      index: 0,
      uuid,
      model: "A100",
      type: "A100",
      memoryMiB: 10240,
      mig: { profile: "1g.10gb", parentUuid: parent },
    });
    const r = withoutDrained(
      { available: true, toolkit: false, devices: [mig("MIG-a", "GPU-p"), mig("MIG-b", "GPU-q")] },
      drained,
    );
    assert.deepEqual(
      r.devices.map((d) => d.uuid),
      ["MIG-b"],
    );
    assert.deepEqual(r.drained, drained);
    const off = { available: false, reason: "no driver", toolkit: false, devices: [] };
    assert.equal(withoutDrained(off, drained), off);
  });
});
