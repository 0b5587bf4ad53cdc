// MIG slices on the agent: the GI/CI ids read from plain nvidia-smi, the
// capability files the driver publishes, and the device nodes the agent's
// own injection strategy gives a slice (the same the toolkit's CDI spec names).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it, type TestContext } from "node:test";
import { parseCdiSpec } from "../../agent/capacity/cdi.ts";
import { agentGpuInjection, GpuInjector } from "../../agent/capacity/gpu-injection.ts";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import { charDeviceMajor, migCapNodes, parseCapAccess } from "../../agent/capacity/mig-caps.ts";
import { parseMigDeviceTable } from "../../agent/capacity/nvidia.ts";
import { isBerthError } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import { needs } from "../helpers/env.ts";
import { FIXTURES, fakeBin, fakeEnv, listingDevDir, mknodDevDir, nvidiaNodes } from "./fake-nvidia.ts";

const CAPS = fileURLToPath(new URL("../fixtures/nvidia-caps/", import.meta.url));
const capsFacts = (host: string) => ({
  capsDir: join(CAPS, host, "capabilities"),
  procDevices: readFileSync(join(CAPS, host, "devices"), "utf8"),
});

async function probed(t: TestContext, fixture: string, gpus: number): Promise<GpuDevice[]> {
  const bin = fakeBin(t, ["nvidia-smi"]);
  const names = ["nvidiactl", "nvidia-uvm", ...Array.from({ length: gpus }, (_, i) => `nvidia${i}`)];
  const r = await new NvidiaGpuProbe({ env: fakeEnv(bin, fixture), devDir: listingDevDir(t, names) }).probe();
  assert.equal(r.available, true, r.reason);
  return r.devices;
}

describe("MIG: ids, capability files, device nodes", () => {
  it("reads the MIG devices table of plain nvidia-smi (R535 and R580 layouts)", () => {
    const a100 = parseMigDeviceTable(readFileSync(join(FIXTURES, "a100-mig", "smi.txt"), "utf8"));
    assert.deepEqual(
      a100.map((p) => [p.gpuIndex, p.gi, p.ci, p.deviceIndex]),
      [
        [0, 2, 0, 0],
        [0, 3, 0, 1],
        [0, 9, 0, 2],
        [0, 10, 0, 3],
      ],
    );
    const h200 = parseMigDeviceTable(readFileSync(join(FIXTURES, "h200-mig", "smi.txt"), "utf8"));
    assert.deepEqual(
      h200.map((p) => [p.gi, p.deviceIndex]),
      [
        [1, 0],
        [5, 1],
        [13, 2],
        [14, 3],
      ],
    );
    // No MIG table, no rows; the processes table is never read as one.
    assert.deepEqual(parseMigDeviceTable(readFileSync(join(FIXTURES, "h100x8", "smi.txt"), "utf8")), []);
  });

  it("the probe gives each slice its profile, type and GI/CI ids", async (t) => {
    const devices = await probed(t, "h200-mig", 2);
    assert.deepEqual(
      devices.map((d) => [d.index, d.type, d.mig?.profile, d.mig?.gi, d.mig?.ci, d.memoryMiB]),
      [
        [0, "H200", "3g.71gb", 1, 0, 71 * 1024],
        [0, "H200", "2g.35gb", 5, 0, 35 * 1024],
        [0, "H200", "1g.18gb", 13, 0, 18 * 1024],
        [0, "H200", "1g.18gb", 14, 0, 18 * 1024],
        [1, "H200", undefined, undefined, undefined, 143771],
      ],
    );
  });

  it("parses capability files and /proc/devices", () => {
    const host = capsFacts("a100-mig");
    assert.deepEqual(
      parseCapAccess(readFileSync(join(host.capsDir, "gpu0/mig/gi3/ci0/access"), "utf8"), "x"),
      { minor: 31, mode: 0o444 },
    );
    assert.deepEqual(parseCapAccess("DeviceFileMinor: 1\nDeviceFileMode: 256\n", "config"), {
      minor: 1,
      mode: 0o400,
    });
    assert.throws(
      () => parseCapAccess("DeviceFileMode: 292\n", "/proc/x/access"),
      (e) => isBerthError(e) && /\/proc\/x\/access has no "DeviceFileMinor: N"/.test(e.message),
    );
    assert.equal(charDeviceMajor(host.procDevices, "nvidia-caps"), 238);
    assert.equal(charDeviceMajor(host.procDevices, "nvidia-uvm"), 509);
    // "sd" is a block device: never taken for a character one.
    assert.equal(charDeviceMajor(host.procDevices, "sd"), undefined);
  });

  it("a slice's capability nodes are the ones nvidia-ctk's CDI spec names, for every slice", async (t) => {
    const devices = (await probed(t, "a100-mig", 2)).filter((d) => d.mig);
    const spec = parseCdiSpec(readFileSync(join(FIXTURES, "a100-mig", "cdi.json"), "utf8"));
    assert.equal(devices.length, 4);
    for (const d of devices) {
      const fromCdi = spec.devices
        .find((x) => x.name === d.uuid)
        ?.containerEdits.deviceNodes?.map((n) => n.path)
        .filter((p) => p.startsWith("/dev/nvidia-caps/"));
      const ours = migCapNodes(d, capsFacts("a100-mig"));
      assert.deepEqual(
        ours.map((n) => n.path),
        fromCdi,
        d.mig?.profile,
      );
      assert.ok(ours.every((n) => n.major === 238 && n.fileMode === 0o444));
    }
  });

  it("the agent strategy gives a slice its parent node, its two capability nodes and its MIG UUID", async (t) => {
    if (!needs(t, { root: true, commands: ["mknod"] })) return;
    const devices = await probed(t, "h200-mig", 2);
    const slice = devices.find((d) => d.mig?.gi === 13)!;
    const devDir = mknodDevDir(t, nvidiaNodes(2));
    const inj = agentGpuInjection([slice], {
      devDir,
      ldconfigOutput: "",
      binaries: [],
      migCaps: capsFacts("h200-mig"),
    });
    assert.deepEqual(
      inj.devices.map((d) => [d.path, d.major, d.minor]),
      [
        ["/dev/nvidiactl", 195, 255],
        ["/dev/nvidia-uvm", 509, 0],
        ["/dev/nvidia-uvm-tools", 509, 1],
        ["/dev/nvidia-modeset", 195, 254],
        ["/dev/nvidia0", 195, 0],
        ["/dev/nvidia-caps/nvidia-cap120", 238, 120],
        ["/dev/nvidia-caps/nvidia-cap121", 238, 121],
      ],
    );
    assert.deepEqual(
      inj.deviceCgroupRules.slice(-2).map((r) => `${r.major}:${r.minor}`),
      ["238:120", "238:121"],
    );
    assert.equal(inj.env["NVIDIA_VISIBLE_DEVICES"], slice.uuid);

    // Through the injector, from the files it reads itself.
    const bin = fakeBin(t, ["nvidia-smi"]);
    const injector = new GpuInjector({
      strategy: "agent",
      env: { PATH: `${bin}:/usr/bin:/bin` },
      devDir,
      capsDir: capsFacts("h200-mig").capsDir,
      procDevicesPath: join(CAPS, "h200-mig", "devices"),
      listLibraries: async () => "",
    });
    const viaInjector = await injector.inject([slice]);
    assert.deepEqual(viaInjector.devices, inj.devices);
  });

  it("refuses a slice whose ids or capability files are missing, naming why", async (t) => {
    const devices = (await probed(t, "h200-mig", 2)).filter((d) => d.mig);
    const slice = devices[0]!;
    const facts = { devDir: "/dev", ldconfigOutput: "", binaries: [] };
    assert.throws(
      () => agentGpuInjection([slice], facts),
      (e) =>
        isBerthError(e) &&
        e.code === "failed_precondition" &&
        /capability files were not read/.test(e.message),
    );
    const noIds: GpuDevice = { ...slice, mig: { profile: "3g.71gb", parentUuid: slice.mig!.parentUuid } };
    assert.throws(
      () => migCapNodes(noIds, capsFacts("h200-mig")),
      (e) => isBerthError(e) && /no GPU\/compute instance ids.*nvidia-ctk/.test(e.message),
    );
    // The A100's tree has no GI 1: the slice was destroyed since the probe.
    assert.throws(
      () => migCapNodes(slice, capsFacts("a100-mig")),
      (e) => isBerthError(e) && /gpu0\/mig\/gi1\/access cannot be read \(ENOENT\)/.test(e.message),
    );
    assert.throws(
      () => migCapNodes(slice, { ...capsFacts("h200-mig"), procDevices: "Character devices:\n195 nvidia\n" }),
      /no "nvidia-caps" character device/,
    );
  });
});
