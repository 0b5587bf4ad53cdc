import { type CommandRunner, execaRunner, findExecutable } from "../capacity/index.ts";

// GPU utilisation and memory in use, one nvidia-smi call for every GPU of the
// host per sample round. Only whole GPUs are listed: a MIG instance's uuid is
// not in the answer, so containers on MIG slices get no GPU figures.

export const GPU_USAGE_ARGS = [
  "--query-gpu=uuid,utilization.gpu,memory.used",
  "--format=csv,noheader,nounits",
] as const;

export interface GpuUsage {
  /** 0-100; null where the driver answers "[N/A]" or "[Not Supported]". */
  utilizationPercent: number | null;
  memoryUsedBytes: number | null;
}

/** Parses the answer to GPU_USAGE_ARGS into uuid → usage. Throws on a malformed line, naming it. */
export function parseGpuUsageCsv(text: string): Map<string, GpuUsage> {
  const out = new Map<string, GpuUsage>();
  for (const [n, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    const [uuid, util, mem, ...rest] = line.split(",").map((c) => c.trim());
    if (!uuid?.startsWith("GPU-") || util === undefined || mem === undefined || rest.length > 0) {
      throw new Error(`nvidia-smi usage line ${n + 1} is not "uuid, utilization.gpu, memory.used": "${line}"`);
    }
    const memMiB = numberOrNull(mem);
    out.set(uuid, {
      utilizationPercent: numberOrNull(util),
      memoryUsedBytes: memMiB === null ? null : Math.round(memMiB * 1024 * 1024),
    });
  }
  return out;
}

function numberOrNull(v: string | undefined): number | null {
  if (v === undefined || v === "" || v.startsWith("[")) return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

export interface GpuUsageReaderOptions {
  /** @default "nvidia-smi" */
  nvidiaSmiPath?: string;
  /** @default process.env */
  env?: NodeJS.ProcessEnv;
  /** @default 5000 */
  timeoutMs?: number;
  runner?: CommandRunner;
}

export type GpuUsageResult = { ok: true; gpus: Map<string, GpuUsage> } | { ok: false; reason: string };

/** Runs nvidia-smi for usage figures. A host without nvidia-smi answers `absent`, never an error. */
export class GpuUsageReader {
  private readonly path: string;
  private readonly env: NodeJS.ProcessEnv;
  private readonly timeoutMs: number;
  private readonly runner: CommandRunner;

  constructor(o: GpuUsageReaderOptions = {}) {
    this.path = o.nvidiaSmiPath ?? "nvidia-smi";
    this.env = o.env ?? process.env;
    this.timeoutMs = o.timeoutMs ?? 5000;
    this.runner = o.runner ?? execaRunner;
  }

  async read(): Promise<GpuUsageResult | "absent"> {
    const file = findExecutable(this.path, this.env.PATH);
    if (!file) return "absent";
    const r = await this.runner(file, GPU_USAGE_ARGS, { timeoutMs: this.timeoutMs, env: this.env });
    if (r.timedOut) return { ok: false, reason: `nvidia-smi did not answer within ${this.timeoutMs} ms` };
    if (r.spawnError) return { ok: false, reason: `cannot run ${file}: ${r.spawnError}` };
    if (r.exitCode !== 0) {
      const said = `${r.stderr}\n${r.stdout}`.trim().split("\n")[0] ?? "";
      return { ok: false, reason: `nvidia-smi exited with ${r.exitCode}: ${said}` };
    }
    try {
      return { ok: true, gpus: parseGpuUsageCsv(r.stdout) };
    } catch (e) {
      return { ok: false, reason: (e as Error).message };
    }
  }
}
