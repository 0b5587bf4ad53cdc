// The GPU toolkit hooks' path (docs/gpus.md, "Hooks"): the CDI spec's
// createContainer hooks reach the container's OCI config as they are; the
// agent strategy brings its own ld cache hook and `libcuda.so`; a hook whose
// program is not on the host is refused before anything starts; and the
// agent's hook really makes a library mounted outside the image's search
// path loadable in a runc container (no GPU needed for that).

import assert from "node:assert/strict";
import { copyFileSync, existsSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import pino from "pino";
import { agentGpuInjection, GpuInjector } from "../../agent/capacity/gpu-injection.ts";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import type { GpuInjection } from "../../agent/capacity/index.ts";
import { ldcacheHook } from "../../agent/capacity/ldcache-hook.ts";
import { findExecutable } from "../../agent/capacity/commands.ts";
import { buildContainerSpec } from "../../agent/host/container-spec.ts";
import { injectGpus } from "../../agent/host/startup.ts";
import { buildOciSpec, type HostFacts } from "../../agent/runtime/oci-spec.ts";
import { parseProcLimits } from "../../agent/runtime/rlimits.ts";
import { isBerthError } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { py, runtimeHarness } from "../runtime/harness.ts";
import { fakeBin, fakeEnv, listingDevDir, mknodDevDir, nvidiaNodes } from "./fake-nvidia.ts";

const LDCONFIG = findExecutable("ldconfig", "/usr/sbin:/sbin:/usr/bin:/bin");
const HOST: HostFacts = {
  cgroupVersion: 2,
  swapAccounting: true,
  arch: "x64",
  hardLimits: parseProcLimits(readFileSync("/proc/self/limits", "utf8")),
};

async function probedDevices(t: TestContext, gpus: number): Promise<GpuDevice[]> {
  const bin = fakeBin(t, ["nvidia-smi"]);
  const names = ["nvidiactl", "nvidia-uvm", ...Array.from({ length: gpus }, (_, i) => `nvidia${i}`)];
  const r = await new NvidiaGpuProbe({
    env: fakeEnv(bin, "h100x8"),
    devDir: listingDevDir(t, names),
  }).probe();
  assert.equal(r.available, true, r.reason);
  return r.devices;
}

/** The spec a GPU container gets from this injection, as config.json. */
function ociOf(injection: GpuInjection) {
  const spec = buildContainerSpec({
    req: { id: "gpu-ctr", args: ["true"], env: {}, cpu: 1, memoryBytes: 2 ** 30, labels: {} } as never,
    image: {
      layers: ["/layers/0"],
      config: { env: [], entrypoint: [], cmd: [], user: "", workingDir: "" },
      ref: "x",
    },
    mounts: [],
    gpu: injection,
  } as never);
  return buildOciSpec(spec, HOST);
}

describe("GPU hooks", () => {
  it("the CDI spec's createContainer hooks reach config.json as the toolkit wrote them", async (t) => {
    if (!needs(t, { root: true, commands: ["mknod"] })) return;
    const devices = await probedDevices(t, 8);
    const devDir = mknodDevDir(t, nvidiaNodes(8));
    const bin = fakeBin(t, ["nvidia-smi", "nvidia-ctk"]);
    const injector = new GpuInjector({ env: fakeEnv(bin, "h100x8"), devDir });
    const inj = await injector.inject(devices.filter((d) => d.index === 2));
    const oci = ociOf(inj);
    assert.deepEqual(oci.hooks, {
      createContainer: [
        {
          path: "/usr/bin/nvidia-ctk",
          args: [
            "nvidia-ctk",
            "hook",
            "create-symlinks",
            "--link",
            "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
          ],
        },
        {
          path: "/usr/bin/nvidia-ctk",
          args: ["nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"],
        },
      ],
    });
    // A container without GPUs has no hooks at all.
    assert.equal(
      ociOf({ env: {}, mounts: [], devices: [], deviceCgroupRules: [], hooks: {} }).hooks,
      undefined,
    );
  });

  it("the agent strategy adds its ld cache hook over the libraries' directories, and libcuda.so", async (t) => {
    if (!needs(t, { root: true, commands: ["mknod"] })) return;
    const devices = await probedDevices(t, 8);
    const devDir = mknodDevDir(t, nvidiaNodes(8));
    const dir = tempDir(t, "berth-libs-");
    writeFileSync(join(dir, "libcuda.so.550.54.15"), "\x7fELF");
    symlinkSync("libcuda.so.550.54.15", join(dir, "libcuda.so.1"));
    writeFileSync(join(dir, "libnvidia-ml.so.550.54.15"), "\x7fELF");
    symlinkSync("libnvidia-ml.so.550.54.15", join(dir, "libnvidia-ml.so.1"));
    const ldconfigOutput = [
      `\tlibcuda.so.1 (libc6,x86-64) => ${dir}/libcuda.so.1`,
      `\tlibnvidia-ml.so.1 (libc6,x86-64) => ${dir}/libnvidia-ml.so.1`,
    ].join("\n");
    const ldcache = { nodePath: "/usr/bin/node", ldconfigPath: "/sbin/ldconfig" };
    const inj = agentGpuInjection(devices.slice(0, 1), { devDir, ldconfigOutput, binaries: [], ldcache });
    assert.deepEqual(inj.hooks, { createContainer: [ldcacheHook(ldcache, [dir], "550.54.15")] });
    const hook = inj.hooks.createContainer![0]!;
    assert.equal(hook.path, "/usr/bin/node");
    assert.deepEqual(hook.args?.slice(0, 2), ["node", "-e"]);
    assert.deepEqual(hook.args?.slice(3), ["--", "/sbin/ldconfig", "550.54.15", dir]);
    // No libcuda.so on the host: the file libcuda.so.1 leads to, under that name.
    assert.deepEqual(
      inj.mounts.find((m) => m.destination === join(dir, "libcuda.so")),
      {
        source: join(dir, "libcuda.so.550.54.15"),
        destination: join(dir, "libcuda.so"),
        type: "bind",
        options: ["ro", "nosuid", "nodev", "bind"],
      },
    );
    assert.deepEqual(ociOf(inj).hooks, inj.hooks);

    // Through the injector: the agent's node and the host's ldconfig.
    const injector = new GpuInjector({
      strategy: "agent",
      devDir,
      listLibraries: async () => ldconfigOutput,
    });
    const viaInjector = await injector.inject(devices.slice(0, 1));
    assert.equal(viaInjector.hooks.createContainer?.[0]?.path, process.execPath);
    assert.equal(viaInjector.hooks.createContainer?.[0]?.args?.[4], LDCONFIG);
    assert.equal(
      viaInjector.hooks.createContainer?.[0]?.args?.[5],
      "550.54.15",
      "the host driver, from libcuda's name",
    );
  });

  it("a hook whose program is not on this host is refused before anything starts, naming it", async () => {
    const withHook = (path: string): GpuInjection => ({
      env: {},
      mounts: [],
      devices: [],
      deviceCgroupRules: [],
      hooks: { createContainer: [{ path, args: ["nvidia-ctk", "hook", "update-ldcache"] }] },
    });
    const log = pino({ level: "silent" });
    const gpu = [{ uuid: "GPU-1" }] as GpuDevice[];
    await assert.rejects(
      injectGpus({ inject: async () => withHook("/nonexistent/nvidia-ctk") }, log, "c1", gpu),
      (e: unknown) =>
        isBerthError(e) &&
        e.code === "failed_precondition" &&
        /createContainer hook \/nonexistent\/nvidia-ctk \(hook update-ldcache\) is not an executable on this host.*nvidia-ctk/.test(
          e.message,
        ),
    );
    const ok = await injectGpus({ inject: async () => withHook(process.execPath) }, log, "c1", gpu);
    assert.equal(ok.hooks.createContainer?.length, 1);
  });

  it("the agent's hook makes a library mounted outside the image's search path loadable (real runc)", async (t) => {
    if (!needs(t, { root: true, commands: ["runc", "mount", "umount", "ldconfig"] })) return;
    const h = await runtimeHarness(t);
    // A host library, mounted where no loader looks, as a driver's would be in a foreign image.
    const candidates = [
      "/usr/lib/x86_64-linux-gnu/libz.so.1",
      "/lib/x86_64-linux-gnu/libz.so.1",
      "/usr/lib64/libz.so.1",
    ];
    const lib = realpathSync(candidates.find((p) => existsSync(p))!);
    const dir = "/opt/berth-fake-driver";
    // An image's CUDA compat directory: a newer user-mode driver (by its name) and a library.
    const compat = tempDir(t, "berth-compat-");
    writeFileSync(join(compat, "libcuda.so.560.35.03"), "");
    copyFileSync(lib, join(compat, "libz.so.1"));
    const mounts = [
      { source: lib, destination: `${dir}/libz.so.1`, readonly: true },
      { source: compat, destination: "/usr/local/cuda/compat", readonly: true },
    ];
    const listCache = py(
      [
        "import subprocess",
        "out = subprocess.run(['ldconfig', '-p'], capture_output=True, text=True, check=True).stdout",
        "for line in out.splitlines():",
        "    if 'berth-fake-driver' in line or 'cuda/compat' in line: print(line.strip())",
      ].join("\n"),
    );
    const run = async (hooks?: GpuInjection["hooks"]) => {
      const spec = h.spec(listCache, { mounts, ...(hooks ? { hooks } : {}) });
      await h.rt.run(spec);
      const exit = await h.exitEvent(spec.id);
      assert.equal(exit.exitCode, 0, exit.stderrTail);
      return h.linesOf(spec.id);
    };
    assert.deepEqual(await run(), [], "without the hook the loader does not know the directory");
    const host = { nodePath: process.execPath, ldconfigPath: LDCONFIG! };
    // The host's driver is newer than the image's compat libcuda: the compat directory stays out.
    assert.deepEqual(await run({ createContainer: [ldcacheHook(host, [dir], "570.86.10")] }), [
      "libz.so.1 (libc6,x86-64) => /opt/berth-fake-driver/libz.so.1",
    ]);
    // An older host driver: the compat directory comes first, so the loader takes its libraries.
    assert.deepEqual(await run({ createContainer: [ldcacheHook(host, [dir], "535.129.03")] }), [
      "libz.so.1 (libc6,x86-64) => /usr/local/cuda/compat/libz.so.1",
      "libz.so.1 (libc6,x86-64) => /opt/berth-fake-driver/libz.so.1",
    ]);
  });
});
