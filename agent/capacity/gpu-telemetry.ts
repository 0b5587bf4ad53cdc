// What each GPU is doing and how it is: one `nvidia-smi --query-gpu` call per
// round for every physical GPU of the host. nvidia-smi's query has no rows
// for MIG instances, so a MIG slice's figures are its parent GPU's.

import type { GpuTelemetry } from "../../shared/subjects.ts";
import { type CommandRunner, execaRunner, findExecutable } from "./commands.ts";

/** The fields asked of nvidia-smi, in order; each is in `nvidia-smi --help-query-gpu`. */
export const GPU_TELEMETRY_FIELDS = [
  "index",
  "uuid",
  "name",
  "pci.bus_id",
  "utilization.gpu",
  "utilization.memory",
  "memory.used",
  "memory.total",
  "temperature.gpu",
  "temperature.memory",
  "power.draw",
  "clocks.sm",
  "clocks.mem",
  "ecc.errors.corrected.volatile.total",
  "ecc.errors.uncorrected.volatile.total",
] as const;

export const GPU_TELEMETRY_ARGS = [
  `--query-gpu=${GPU_TELEMETRY_FIELDS.join(",")}`,
  "--format=csv,noheader,nounits",
] as const;

/** A GPU nvidia-smi could not reach: it names the bus id and why instead of printing a row. */
export interface UnreachableGpu {
  /** As nvidia-smi prints it, e.g. "0000:3B:00.0". */
  pciBusId: string;
  message: string;
}

export interface TelemetryTable {
  gpus: GpuTelemetry[];
  unreachable: UnreachableGpu[];
}

// "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"
// (the space after "GPU" is absent in some drivers).
const UNREACHABLE =
  /^Unable to determine the device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+(?:\.[0-9A-Fa-f]+)?):\s*(.*)$/;

/** Values in brackets the driver prints instead of a number; these mean the GPU needs a reset. */
const RESET_VALUES = ["[GPU requires reset]", "[GPU is lost]"];

/**
 * Parses the answer to GPU_TELEMETRY_ARGS. "[N/A]", "[Not Supported]" and the
 * like read as null; a value saying the GPU must be reset is kept in
 * `problem`. Lines naming a GPU the driver cannot reach go to `unreachable`.
 * Throws on any other malformed line, naming it.
 */
export function parseTelemetryCsv(text: string): TelemetryTable {
  const gpus: GpuTelemetry[] = [];
  const unreachable: UnreachableGpu[] = [];
  for (const [n, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    const lost = UNREACHABLE.exec(line);
    if (lost) {
      unreachable.push({ pciBusId: lost[1]!, message: lost[2]!.trim().replace(/\s+/g, " ") });
      continue;
    }
    const cols = line.split(",").map((c) => c.trim());
    if (cols.length !== GPU_TELEMETRY_FIELDS.length) {
      throw new Error(
        `nvidia-smi telemetry line ${n + 1} has ${cols.length} columns, expected ${GPU_TELEMETRY_FIELDS.length}: "${line}"`,
      );
    }
    const [index, uuid, name, bus, util, memUtil, used, total, temp, memTemp, power, sm, mem, sbe, dbe] =
      cols as string[] as [string, string, string, string, ...string[]];
    if (!/^\d+$/.test(index) || !uuid.startsWith("GPU-")) {
      throw new Error(
        `nvidia-smi telemetry line ${n + 1} does not start with an index and a GPU uuid: "${line}"`,
      );
    }
    const problem = cols.find((c) => RESET_VALUES.includes(c));
    gpus.push({
      index: Number(index),
      uuid,
      model: name,
      pciBusId: bus,
      utilizationPercent: numberOrNull(util),
      memoryUtilizationPercent: numberOrNull(memUtil),
      memoryUsedMiB: numberOrNull(used),
      memoryTotalMiB: numberOrNull(total),
      temperatureC: numberOrNull(temp),
      memoryTemperatureC: numberOrNull(memTemp),
      powerWatts: numberOrNull(power),
      smClockMHz: numberOrNull(sm),
      memoryClockMHz: numberOrNull(mem),
      eccCorrectedVolatile: numberOrNull(sbe),
      eccUncorrectedVolatile: numberOrNull(dbe),
      ...(problem ? { problem: `the driver answers "${problem.slice(1, -1)}"` } : {}),
    });
  }
  return { gpus, unreachable };
}

function numberOrNull(v: string | undefined): number | null {
  if (v === undefined || v === "" || v.startsWith("[")) return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

/** "00000000:3B:00.0", "0000:3b:00" and "3b:00.0" all → "0000:3b:00" (domain, bus, device; no function). */
export function normalizePciBusId(id: string): string | undefined {
  const m = /^(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.[0-9a-f])?$/i.exec(id.trim());
  if (!m) return undefined;
  const domain = Number.parseInt(m[1] ?? "0", 16);
  const hex = (n: number, w: number) => n.toString(16).padStart(w, "0");
  return `${hex(domain, 4)}:${hex(Number.parseInt(m[2]!, 16), 2)}:${hex(Number.parseInt(m[3]!, 16), 2)}`;
}

export interface GpuTelemetryReaderOptions {
  /** @default "nvidia-smi" */
  nvidiaSmiPath?: string;
  /** @default process.env */
  env?: NodeJS.ProcessEnv;
  /** @default 5000 */
  timeoutMs?: number;
  runner?: CommandRunner;
}

export type TelemetryResult = ({ ok: true } & TelemetryTable) | { ok: false; reason: string };

/** Runs nvidia-smi for the telemetry table. A host without nvidia-smi answers "absent". */
export class GpuTelemetryReader {
  private readonly path: string;
  private readonly env: NodeJS.ProcessEnv;
  private readonly timeoutMs: number;
  private readonly runner: CommandRunner;

  constructor(o: GpuTelemetryReaderOptions = {}) {
    this.path = o.nvidiaSmiPath ?? "nvidia-smi";
    this.env = o.env ?? process.env;
    this.timeoutMs = o.timeoutMs ?? 5000;
    this.runner = o.runner ?? execaRunner;
  }

  async read(): Promise<TelemetryResult | "absent"> {
    const file = findExecutable(this.path, this.env.PATH);
    if (!file) return "absent";
    const r = await this.runner(file, GPU_TELEMETRY_ARGS, { timeoutMs: this.timeoutMs, env: this.env });
    if (r.timedOut) return { ok: false, reason: `nvidia-smi did not answer within ${this.timeoutMs} ms` };
    if (r.spawnError) return { ok: false, reason: `cannot run ${file}: ${r.spawnError}` };
    let table: TelemetryTable;
    try {
      table = parseTelemetryCsv(r.stdout);
      // Drivers differ in which stream names an unreachable GPU; take it from either.
      for (const line of r.stderr.split("\n")) {
        const lost = UNREACHABLE.exec(line.trim());
        if (lost)
          table.unreachable.push({ pciBusId: lost[1]!, message: lost[2]!.trim().replace(/\s+/g, " ") });
      }
    } catch (e) {
      return { ok: false, reason: (e as Error).message };
    }
    // With a GPU lost nvidia-smi exits non-zero but still prints the others' rows.
    if (r.exitCode !== 0 && table.unreachable.length === 0) {
      const said = `${r.stderr}\n${r.stdout}`.trim().split("\n")[0] ?? "";
      return { ok: false, reason: `nvidia-smi exited with ${r.exitCode}: ${said}` };
    }
    return { ok: true, ...table };
  }
}
