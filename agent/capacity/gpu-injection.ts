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
  const mig = devices.find((d) => d.mig);
  if (mig) {
    // MIG instances also need their /dev/nvidia-caps nodes, whose minors only the toolkit resolves.
    throw new BerthError(
      "failed_precondition",
      `GPU ${mig.uuid} is a MIG instance; MIG devices need the NVIDIA container toolkit (nvidia-ctk) on the host`,
      { uuid: mig.uuid },
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
  ];

  const mounts: GpuMount[] = driverLibraryPaths(facts.ldconfigOutput).map((p) => ({
    source: p,
    destination: p,
    type: "bind",
    options: [...READ_ONLY_BIND],
  }));
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
    hooks: {},
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
  /** Returns the host's `ldconfig -p` output. @default runs ldconfig -p */
  listLibraries?: () => Promise<string>;
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
  listLibraries: () => Promise<string>;
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
    listLibraries: opts.listLibraries ?? (() => runLdconfig(runner, env, timeoutMs)),
    runner,
    env,
    timeoutMs,
  };
}

async function runLdconfig(
  runner: CommandRunner,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<string> {
  // ldconfig lives in /sbin, which a service's PATH may leave out.
  const ldconfig = findExecutable("ldconfig", `${env.PATH ?? ""}:/usr/sbin:/sbin`);
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

  async inject(devices: readonly GpuDevice[]): Promise<GpuInjection> {
    assertAssignable(devices);
    if (this.strategy() === "agent") {
      const o = this.options;
      const binaries = ["nvidia-smi", "nvidia-debugdump"]
        .map((b) => findExecutable(b === "nvidia-smi" ? o.nvidiaSmiPath : b, o.env.PATH))
        .filter((p): p is string => p !== undefined);
      return agentGpuInjection(devices, {
        devDir: o.devDir,
        ldconfigOutput: await o.listLibraries(),
        binaries,
      });
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
