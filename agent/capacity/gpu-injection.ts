// Giving assigned GPUs, and only those, to a container. Two strategies:
// CDI (the NVIDIA container toolkit describes what to add) and the agent's
// own, for hosts with a driver but no toolkit.

import { existsSync, realpathSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { basename, isAbsolute, join } from "node:path";
import { BerthError, invalid } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import { type CdiSpec, injectionFromCdiSpec, parseCdiSpec } from "./cdi.ts";
import { type CommandRunner, execaRunner, findExecutable, outputSummary } from "./commands.ts";
import { type MigCapFacts, migCapNodes, NVIDIA_CAPS_PROC_DIR } from "./mig-caps.ts";
import { DEFAULT_MPS_DIR, mpsClientInjection, mpsDaemonState, mpsPaths } from "./mps.ts";
import {
  driverVersionOf,
  type LdcacheHookHost,
  ldcacheHook,
  libcudaDevName,
  libraryDirs,
} from "./ldcache-hook.ts";
import {
  CONTAINER_DEV,
  cgroupRuleFor,
  type GpuDeviceNode,
  type GpuInjection,
  type GpuMount,
  readCharDevice,
} from "./injection-types.ts";

export type { GpuInjection } from "./injection-types.ts";

/** The driver capabilities berth gives containers: CUDA and NVML (nvidia-smi). */
export const DRIVER_CAPABILITIES = "compute,utility";

// The libraries of the "compute" and "utility" capabilities, as
// libnvidia-container lists them; graphics and video libraries stay out.
export const DRIVER_LIBRARIES = [
  "libcuda.so",
  "libcudadebugger.so",
  "libnvidia-ml.so",
  "libnvidia-cfg.so",
  "libnvidia-opencl.so",
  "libnvidia-gpucomp.so",
  "libnvidia-ptxjitcompiler.so",
  "libnvidia-fatbinaryloader.so",
  "libnvidia-allocator.so",
  "libnvidia-compiler.so",
  "libnvidia-nvvm.so",
] as const;

const READ_ONLY_BIND = ["ro", "nosuid", "nodev", "bind"];

export interface LdconfigEntry {
  name: string;
  flags: string;
  path: string;
}

/** Parses `ldconfig -p`: lines like "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1". */
export function parseLdconfig(text: string): LdconfigEntry[] {
  const out: LdconfigEntry[] = [];
  for (const line of text.split("\n")) {
    const m = /^\s+(\S+)\s+\((.*?)\)\s+=>\s+(.+?)\s*$/.exec(line);
    if (m) out.push({ name: m[1]!, flags: m[2]!, path: m[3]! });
  }
  return out;
}

/** The 64-bit driver libraries from an `ldconfig -p` listing whose files exist. */
export function driverLibraryPaths(ldconfigOutput: string): string[] {
  const paths: string[] = [];
  for (const e of parseLdconfig(ldconfigOutput)) {
    const wanted = DRIVER_LIBRARIES.some((lib) => e.name === lib || e.name.startsWith(`${lib}.`));
    // "(libc6)" alone is a 32-bit library on a 64-bit host; containers run 64-bit CUDA.
    if (!wanted || !/x86-64|AArch64|64bit/.test(e.flags)) continue;
    if (!isAbsolute(e.path) || !existsSync(e.path)) continue;
    paths.push(e.path);
    // The soname is usually a symlink; give the container the versioned file too.
    const real = realpathSync(e.path);
    if (real !== e.path) paths.push(real);
  }
  return [...new Set(paths)];
}

export interface AgentInjectionFacts {
  /** Host directory holding the NVIDIA device nodes (the container sees them under /dev). */
  devDir: string;
  /** `ldconfig -p` output of the host. */
  ldconfigOutput: string;
  /** Host paths of nvidia-smi and friends, mounted at /usr/bin/<name>. */
  binaries: string[];
  /** The driver's MIG capability files and /proc/devices: needed only when a MIG instance is assigned. */
  migCaps?: MigCapFacts;
  /**
   * Do the toolkit hooks' work (ldcache-hook.ts): a createContainer hook that adds the libraries'
   * directories to the container's ld.so.cache, and `libcuda.so` where the host has none.
   */
  ldcache?: LdcacheHookHost;
}

function assertAssignable(devices: readonly GpuDevice[]): void {
  if (devices.length === 0) throw invalid("GPU injection: no GPUs assigned");
  const uuids = new Set(devices.map((d) => d.uuid));
  if (uuids.size !== devices.length) throw invalid("GPU injection: a GPU is assigned twice");
}

/**
 * The agent's own strategy: the control nodes, the assigned GPUs' nodes and
 * nothing else, a cgroup rule for each, the driver's libraries and tools bound
 * read-only at their host paths.
 */
export function agentGpuInjection(devices: readonly GpuDevice[], facts: AgentInjectionFacts): GpuInjection {
  assertAssignable(devices);
  const migs = devices.filter((d) => d.mig);
  if (migs.length > 0 && !facts.migCaps) {
    throw new BerthError(
      "failed_precondition",
      `GPU ${migs[0]!.uuid} is a MIG instance and the driver's capability files were not read`,
      { uuid: migs[0]!.uuid },
    );
  }
  const node = (name: string): GpuDeviceNode =>
    readCharDevice(join(facts.devDir, name), `${CONTAINER_DEV}/${name}`);
  const optional = (name: string): GpuDeviceNode[] =>
    existsSync(join(facts.devDir, name)) ? [node(name)] : [];

  const indexes = [...new Set(devices.map((d) => d.index))].sort((a, b) => a - b);
  const nodes = [
    node("nvidiactl"),
    node("nvidia-uvm"),
    ...optional("nvidia-uvm-tools"),
    ...optional("nvidia-modeset"),
    ...indexes.map((i) => node(`nvidia${i}`)),
    // A slice's parent node alone opens nothing: its two capability nodes grant the slice.
    ...migs.flatMap((d) => migCapNodes(d, facts.migCaps!)),
  ];

  const libraries: GpuMount[] = driverLibraryPaths(facts.ldconfigOutput).map((p) => ({
    source: p,
    destination: p,
    type: "bind",
    options: [...READ_ONLY_BIND],
  }));
  const withHooks = facts.ldcache !== undefined && libraries.length > 0;
  const mounts = [...libraries, ...(withHooks ? libcudaDevName(libraries, realpathSync) : [])];
  for (const bin of facts.binaries) {
    mounts.push({
      source: bin,
      destination: `/usr/bin/${basename(bin)}`,
      type: "bind",
      options: [...READ_ONLY_BIND],
    });
  }

  return {
    env: {
      NVIDIA_VISIBLE_DEVICES: devices.map((d) => d.uuid).join(","),
      NVIDIA_DRIVER_CAPABILITIES: DRIVER_CAPABILITIES,
    },
    mounts,
    devices: nodes,
    deviceCgroupRules: nodes.map(cgroupRuleFor),
    hooks: withHooks
      ? {
          createContainer: [
            ldcacheHook(
              facts.ldcache!,
              libraryDirs(libraries),
              driverVersionOf(libraries.map((m) => m.source)),
            ),
          ],
        }
      : {},
  };
}

export type GpuInjectionStrategy = "cdi" | "agent";

export interface GpuInjectorOptions {
  /** "auto" uses CDI when nvidia-ctk is found, else the agent's own strategy. @default "auto" */
  strategy?: GpuInjectionStrategy | "auto";
  /** Where the NVIDIA device nodes live on the host. @default "/dev" */
  devDir?: string;
  /** @default "nvidia-ctk" (looked up on PATH) */
  nvidiaCtkPath?: string;
  /** @default "nvidia-smi" (looked up on PATH) */
  nvidiaSmiPath?: string;
  /** Read this CDI spec (JSON) instead of running "nvidia-ctk cdi generate". */
  cdiSpecPath?: string;
  /** The driver's capability directory (MIG slices, agent strategy). @default "/proc/driver/nvidia/capabilities" */
  capsDir?: string;
  /** Where the kernel lists device majors. @default "/proc/devices" */
  procDevicesPath?: string;
  /** The MPS directory of shared GPUs (mps.ts MpsPaths). @default "/run/berth/mps" */
  mpsDir?: string;
  /** Where processes are looked up (the MPS daemon's pid). @default "/proc" */
  procDir?: string;
  /** Returns the host's `ldconfig -p` output. @default runs ldconfig -p */
  listLibraries?: () => Promise<string>;
  /** The host's ldconfig, which the agent strategy's hook runs. @default found on PATH, /usr/sbin, /sbin */
  ldconfigPath?: string;
  /** The node that runs that hook. @default process.execPath */
  nodePath?: string;
  /** @default execaRunner */
  runner?: CommandRunner;
  /** Environment for PATH lookups and commands. @default process.env */
  env?: NodeJS.ProcessEnv;
  /** Limit for nvidia-ctk and ldconfig. @default 60_000 */
  timeoutMs?: number;
}

export interface ResolvedGpuInjectorOptions {
  strategy: GpuInjectionStrategy | "auto";
  devDir: string;
  nvidiaCtkPath: string;
  nvidiaSmiPath: string;
  cdiSpecPath: string | undefined;
  capsDir: string;
  procDevicesPath: string;
  mpsDir: string;
  procDir: string;
  listLibraries: () => Promise<string>;
  ldconfigPath: string | undefined;
  nodePath: string;
  runner: CommandRunner;
  env: NodeJS.ProcessEnv;
  timeoutMs: number;
}

export function resolveGpuInjectorOptions(opts: GpuInjectorOptions = {}): ResolvedGpuInjectorOptions {
  const runner = opts.runner ?? execaRunner;
  const env = opts.env ?? process.env;
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const strategy = opts.strategy ?? "auto";
  if (!["auto", "cdi", "agent"].includes(strategy)) {
    throw invalid(`GPU injector: strategy must be auto, cdi or agent, got "${strategy}"`);
  }
  const devDir = opts.devDir ?? "/dev";
  if (!isAbsolute(devDir)) throw invalid(`GPU injector: devDir must be an absolute path, got "${devDir}"`);
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
    throw invalid(`GPU injector: timeoutMs must be a positive integer, got ${timeoutMs}`);
  }
  return {
    strategy,
    devDir,
    nvidiaCtkPath: opts.nvidiaCtkPath ?? "nvidia-ctk",
    nvidiaSmiPath: opts.nvidiaSmiPath ?? "nvidia-smi",
    cdiSpecPath: opts.cdiSpecPath,
    capsDir: opts.capsDir ?? NVIDIA_CAPS_PROC_DIR,
    procDevicesPath: opts.procDevicesPath ?? "/proc/devices",
    mpsDir: opts.mpsDir ?? DEFAULT_MPS_DIR,
    procDir: opts.procDir ?? "/proc",
    listLibraries: opts.listLibraries ?? (() => runLdconfig(runner, env, timeoutMs)),
    ldconfigPath: opts.ldconfigPath ?? findLdconfig(env),
    nodePath: opts.nodePath ?? process.execPath,
    runner,
    env,
    timeoutMs,
  };
}

// ldconfig lives in /sbin, which a service's PATH may leave out.
const findLdconfig = (env: NodeJS.ProcessEnv) =>
  findExecutable("ldconfig", `${env.PATH ?? ""}:/usr/sbin:/sbin`);

async function runLdconfig(
  runner: CommandRunner,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<string> {
  const ldconfig = findLdconfig(env);
  if (!ldconfig)
    throw new BerthError("unavailable", "ldconfig not found: cannot locate the NVIDIA driver libraries");
  const r = await runner(ldconfig, ["-p"], { timeoutMs, env });
  if (r.exitCode !== 0) {
    throw new BerthError(
      "unavailable",
      `ldconfig -p failed: ${r.spawnError ?? (outputSummary(r) || "no output")}`,
    );
  }
  return r.stdout;
}

/** Decides the strategy and produces the injection for a container's assigned GPUs. */
export class GpuInjector {
  readonly options: ResolvedGpuInjectorOptions;
  private spec?: Promise<CdiSpec>;

  constructor(opts: GpuInjectorOptions = {}) {
    this.options = resolveGpuInjectorOptions(opts);
  }

  strategy(): GpuInjectionStrategy {
    const o = this.options;
    if (o.strategy !== "auto") return o.strategy;
    if (o.cdiSpecPath) return "cdi";
    return findExecutable(o.nvidiaCtkPath, o.env.PATH) ? "cdi" : "agent";
  }

  /**
   * The injection for a container's GPUs; `sharedMemoryMiB` for a share of
   * one shared GPU, which adds the MPS client's settings (mps.ts).
   */
  async inject(
    devices: readonly GpuDevice[],
    opts: { sharedMemoryMiB?: number } = {},
  ): Promise<GpuInjection> {
    assertAssignable(devices);
    const shared = devices.find((d) => d.shared);
    if (shared || opts.sharedMemoryMiB !== undefined) {
      if (devices.length !== 1 || !shared || opts.sharedMemoryMiB === undefined) {
        throw invalid("GPU injection: a shared GPU is given alone, with the memory share (gpu_memory)");
      }
      const paths = mpsPaths(this.options.mpsDir);
      // Checked before anything else: without a daemon the container would run without the limits.
      const mps = mpsClientInjection(
        shared,
        opts.sharedMemoryMiB,
        paths,
        mpsDaemonState(paths.pipe, this.options.procDir),
      );
      const base = await this.injectWhole(devices);
      return { ...base, env: { ...base.env, ...mps.env }, mounts: [...base.mounts, ...mps.mounts] };
    }
    return this.injectWhole(devices);
  }

  private async injectWhole(devices: readonly GpuDevice[]): Promise<GpuInjection> {
    if (this.strategy() === "agent") {
      const o = this.options;
      const binaries = ["nvidia-smi", "nvidia-debugdump"]
        .map((b) => findExecutable(b === "nvidia-smi" ? o.nvidiaSmiPath : b, o.env.PATH))
        .filter((p): p is string => p !== undefined);
      if (!o.ldconfigPath) {
        throw new BerthError(
          "failed_precondition",
          "no ldconfig on this host: a container's loader cannot be pointed at the NVIDIA driver libraries " +
            "(install libc-bin, or the NVIDIA container toolkit: nvidia-ctk)",
        );
      }
      const facts: AgentInjectionFacts = {
        devDir: o.devDir,
        ldconfigOutput: await o.listLibraries(),
        binaries,
        ldcache: { nodePath: o.nodePath, ldconfigPath: o.ldconfigPath },
      };
      if (devices.some((d) => d.mig)) {
        facts.migCaps = { capsDir: o.capsDir, procDevices: await readFile(o.procDevicesPath, "utf8") };
      }
      return agentGpuInjection(devices, facts);
    }
    const injection = injectionFromCdiSpec(await this.cdiSpec(), devices, { devDir: this.options.devDir });
    // CDI sets NVIDIA_VISIBLE_DEVICES=void to keep a legacy hook from injecting twice; berth runs
    // no such hook, and code in the container reads this variable to learn its GPUs.
    injection.env["NVIDIA_VISIBLE_DEVICES"] = devices.map((d) => d.uuid).join(",");
    injection.env["NVIDIA_DRIVER_CAPABILITIES"] = DRIVER_CAPABILITIES;
    return injection;
  }

  /** Drops the cached CDI spec, e.g. after the driver version changed. */
  forgetCdiSpec(): void {
    this.spec = undefined;
  }

  private cdiSpec(): Promise<CdiSpec> {
    if (this.spec) return this.spec;
    const loading = this.loadCdiSpec();
    this.spec = loading;
    // A failed generation is not cached: the next container retries it.
    loading.catch(() => {
      if (this.spec === loading) this.spec = undefined;
    });
    return loading;
  }

  private async loadCdiSpec(): Promise<CdiSpec> {
    const o = this.options;
    if (o.cdiSpecPath) return parseCdiSpec(await readFile(o.cdiSpecPath, "utf8"));
    const ctk = findExecutable(o.nvidiaCtkPath, o.env.PATH);
    if (!ctk) {
      throw new BerthError(
        "failed_precondition",
        `${o.nvidiaCtkPath} not found: the CDI strategy needs the toolkit`,
      );
    }
    const r = await o.runner(ctk, ["cdi", "generate", "--format=json", "--device-name-strategy=uuid"], {
      timeoutMs: o.timeoutMs,
      env: o.env,
    });
    if (r.exitCode !== 0 || r.timedOut || r.spawnError) {
      const why =
        r.spawnError ?? (r.timedOut ? `timed out after ${o.timeoutMs} ms` : outputSummary(r) || "no output");
      throw new BerthError("unavailable", `nvidia-ctk cdi generate failed: ${why}`);
    }
    return parseCdiSpec(r.stdout);
  }
}
