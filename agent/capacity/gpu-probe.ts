// GPU preflight: is there a driver, does it answer, are its device nodes
// there, is the container toolkit installed. Every failure becomes a report
// with a reason naming the cause; probe() itself does not throw for them.

import { existsSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { describeError, invalid } from "../../shared/errors.ts";
import type { GpuReport } from "../../shared/fleet.ts";
import {
  type CommandResult,
  type CommandRunner,
  execaRunner,
  findExecutable,
  outputSummary,
} from "./commands.ts";
import {
  type MigInstance,
  type MigPlacement,
  type NvidiaGpu,
  parseCudaVersion,
  parseListMig,
  parseMigDeviceTable,
  parseQueryGpuCsv,
  QUERY_GPU_ARGS,
  QUERY_GPU_FIELDS,
  schedulableDevices,
} from "./nvidia.ts";
import { markShared, type SharedGpuSelection } from "./mps.ts";

/** Anything that can say what GPUs this host offers. */
export interface GpuProbe {
  probe(): Promise<GpuReport>;
}

export interface GpuProbeOptions {
  /** nvidia-smi to run: a name looked up on PATH, or a path. @default "nvidia-smi" */
  nvidiaSmiPath?: string;
  /** The container toolkit's CLI, whose presence enables CDI injection. @default "nvidia-ctk" */
  nvidiaCtkPath?: string;
  /** Where the NVIDIA device nodes live. @default "/dev" */
  devDir?: string;
  /** How commands are run. @default execaRunner */
  runner?: CommandRunner;
  /** Environment for PATH lookups and for the commands. @default process.env */
  env?: NodeJS.ProcessEnv;
  /** How long one nvidia-smi call may take before the driver counts as hung. @default 10_000 */
  timeoutMs?: number;
  /** Exact model name → scheduling type, for models the default rule names badly. @default {} */
  typeOverrides?: Record<string, string>;
  /** GPUs the operator shares through MPS (`--shared-gpus`): reported `shared`. @default none */
  sharedGpus?: SharedGpuSelection;
}

export interface ResolvedGpuProbeOptions {
  nvidiaSmiPath: string;
  nvidiaCtkPath: string;
  devDir: string;
  runner: CommandRunner;
  env: NodeJS.ProcessEnv;
  timeoutMs: number;
  typeOverrides: Record<string, string>;
  sharedGpus: SharedGpuSelection | undefined;
}

export function resolveGpuProbeOptions(opts: GpuProbeOptions = {}): ResolvedGpuProbeOptions {
  const r: ResolvedGpuProbeOptions = {
    nvidiaSmiPath: opts.nvidiaSmiPath ?? "nvidia-smi",
    nvidiaCtkPath: opts.nvidiaCtkPath ?? "nvidia-ctk",
    devDir: opts.devDir ?? "/dev",
    runner: opts.runner ?? execaRunner,
    env: opts.env ?? process.env,
    timeoutMs: opts.timeoutMs ?? 10_000,
    typeOverrides: opts.typeOverrides ?? {},
    sharedGpus: opts.sharedGpus,
  };
  if (!r.nvidiaSmiPath) throw invalid("gpu probe: nvidiaSmiPath must not be empty");
  if (!r.nvidiaCtkPath) throw invalid("gpu probe: nvidiaCtkPath must not be empty");
  if (!isAbsolute(r.devDir)) throw invalid(`gpu probe: devDir must be an absolute path, got "${r.devDir}"`);
  if (!Number.isInteger(r.timeoutMs) || r.timeoutMs <= 0) {
    throw invalid(`gpu probe: timeoutMs must be a positive integer, got ${r.timeoutMs}`);
  }
  for (const [model, type] of Object.entries(r.typeOverrides)) {
    if (!type.trim()) throw invalid(`gpu probe: type override for "${model}" is empty`);
  }
  return r;
}

type Step<T> = { ok: true; value: T } | { ok: false; reason: string };

/** The preflight against the real NVIDIA tools. */
export class NvidiaGpuProbe implements GpuProbe {
  readonly options: ResolvedGpuProbeOptions;
  // The CUDA version only changes with the driver; plain nvidia-smi is the slowest call.
  private cudaFor?: { driverVersion: string; cudaVersion: string | undefined };

  constructor(opts: GpuProbeOptions = {}) {
    this.options = resolveGpuProbeOptions(opts);
  }

  async probe(): Promise<GpuReport> {
    const o = this.options;
    const toolkit = findExecutable(o.nvidiaCtkPath, o.env.PATH) !== undefined;
    const unavailable = (reason: string, extra: Partial<GpuReport> = {}): GpuReport => ({
      available: false,
      reason,
      toolkit,
      devices: [],
      ...extra,
    });

    const smi = findExecutable(o.nvidiaSmiPath, o.env.PATH);
    if (!smi) {
      const where = o.nvidiaSmiPath.includes("/") ? ` at ${o.nvidiaSmiPath}` : "";
      return unavailable(`nvidia-smi not found${where}: no NVIDIA driver on this host`);
    }

    const query = await this.queryGpus(smi);
    if (!query.ok) return unavailable(query.reason);
    const { gpus, migColumn } = query.value;
    if (gpus.length === 0) return unavailable("nvidia-smi answered but lists no GPUs");
    const driverVersion = gpus[0]!.driverVersion;
    const known: Partial<GpuReport> = { driverVersion };

    // MIG instances exist only where MIG mode is on; without the column (old driver) always ask.
    let migs: MigInstance[] = [];
    if (!migColumn || gpus.some((g) => g.migEnabled)) {
      const listed = await this.listMig(smi);
      if (!listed.ok) return unavailable(listed.reason, { ...known, ...this.knownCuda(driverVersion) });
      migs = listed.value;
    }
    // Slices come and go without a driver change: their GI/CI ids are read every round there is one.
    const header = await this.plainSmi(smi, driverVersion, migs.length > 0);
    if (header.cudaVersion) known.cudaVersion = header.cudaVersion;

    const missing = this.missingDeviceNodes(gpus);
    if (missing.length > 0) {
      return unavailable(
        `NVIDIA device nodes missing: ${missing.join(", ")} (the driver answers but its device nodes ` +
          `are not there; run "nvidia-modprobe -u -c=0" or "modprobe nvidia-uvm" on the host)`,
        known,
      );
    }

    let devices: GpuReport["devices"];
    try {
      devices = markShared(
        schedulableDevices(gpus, migs, o.typeOverrides, header.migPlacements),
        o.sharedGpus,
      );
    } catch (e) {
      return unavailable(`nvidia-smi -L output could not be read: ${describeError(e)}`, known);
    }
    if (devices.length === 0) {
      const empty = gpus.filter((g) => g.migEnabled).map((g) => `GPU ${g.index} (${g.name})`);
      return unavailable(
        `MIG is enabled on ${empty.join(", ")} but no MIG instances exist; create them with ` +
          `"nvidia-smi mig -cgi <profiles> -C" or disable MIG with "nvidia-smi -mig 0"`,
        known,
      );
    }
    return { available: true, toolkit, devices, ...known };
  }

  private run(smi: string, args: readonly string[]): Promise<CommandResult> {
    return this.options.runner(smi, args, { timeoutMs: this.options.timeoutMs, env: this.options.env });
  }

  private failure(what: string, r: CommandResult): string | undefined {
    if (r.spawnError) return `${what} could not be started: ${r.spawnError}`;
    if (r.timedOut) {
      return `${what} did not answer within ${this.options.timeoutMs / 1000}s: the NVIDIA driver may be hung`;
    }
    if (r.exitCode !== 0) {
      const text = outputSummary(r) || "no output";
      return `${what} failed (exit ${r.exitCode ?? "by signal"}): ${text}`;
    }
    return undefined;
  }

  private async queryGpus(smi: string): Promise<Step<{ gpus: NvidiaGpu[]; migColumn: boolean }>> {
    let r = await this.run(smi, QUERY_GPU_ARGS);
    let migColumn = true;
    // Drivers before R450 know no MIG and reject the field; ask again without it.
    if (r.exitCode !== 0 && /mig\.mode\.current.*not a valid field/i.test(`${r.stdout}${r.stderr}`)) {
      migColumn = false;
      const fields = QUERY_GPU_FIELDS.filter((f) => f !== "mig.mode.current");
      r = await this.run(smi, [`--query-gpu=${fields.join(",")}`, "--format=csv,noheader,nounits"]);
    }
    // With one GPU lost nvidia-smi exits non-zero but still lists the others: those stay offered.
    const oneLost =
      r.exitCode !== 0 && /Unable to determine the device handle/.test(`${r.stdout}${r.stderr}`);
    const failed = oneLost ? undefined : this.failure("nvidia-smi", r);
    if (failed) return { ok: false, reason: failed };
    try {
      return { ok: true, value: { gpus: parseQueryGpuCsv(r.stdout), migColumn } };
    } catch (e) {
      return { ok: false, reason: `nvidia-smi --query-gpu output could not be read: ${describeError(e)}` };
    }
  }

  private async listMig(smi: string): Promise<Step<MigInstance[]>> {
    const r = await this.run(smi, ["-L"]);
    const failed = this.failure("nvidia-smi -L", r);
    if (failed) return { ok: false, reason: failed };
    try {
      return { ok: true, value: parseListMig(r.stdout) };
    } catch (e) {
      return { ok: false, reason: `nvidia-smi -L output could not be read: ${describeError(e)}` };
    }
  }

  private knownCuda(driverVersion: string): Partial<GpuReport> {
    const v = this.cudaFor?.driverVersion === driverVersion ? this.cudaFor.cudaVersion : undefined;
    return v ? { cudaVersion: v } : {};
  }

  /**
   * Plain `nvidia-smi`: the CUDA version of its header (asked only when the
   * driver changed, unless `withMig`) and its MIG devices table. Best effort:
   * a missing CUDA version does not make the GPUs unusable, and slices
   * without GI/CI ids are still offered (only the agent's own injection
   * strategy needs them, and it says so).
   */
  private async plainSmi(
    smi: string,
    driverVersion: string,
    withMig: boolean,
  ): Promise<{ cudaVersion: string | undefined; migPlacements: MigPlacement[] }> {
    if (!withMig && this.cudaFor?.driverVersion === driverVersion) {
      return { cudaVersion: this.cudaFor.cudaVersion, migPlacements: [] };
    }
    const r = await this.run(smi, []);
    if (r.exitCode !== 0)
      return { cudaVersion: this.knownCuda(driverVersion).cudaVersion, migPlacements: [] };
    const cudaVersion = parseCudaVersion(r.stdout);
    this.cudaFor = { driverVersion, cudaVersion };
    return { cudaVersion, migPlacements: withMig ? parseMigDeviceTable(r.stdout) : [] };
  }

  private missingDeviceNodes(gpus: NvidiaGpu[]): string[] {
    const names = ["nvidiactl", "nvidia-uvm", ...gpus.map((g) => `nvidia${g.index}`)];
    return names.map((n) => join(this.options.devDir, n)).filter((p) => !existsSync(p));
  }
}

export function createGpuProbe(opts: GpuProbeOptions = {}): NvidiaGpuProbe {
  return new NvidiaGpuProbe(opts);
}
