// Parsers for nvidia-smi output and the model-name → scheduling-type rule.
// Pure functions: the probe runs the commands, these only read text.

import { invalid } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";

/** The fields asked of `nvidia-smi --query-gpu`, in order. */
export const QUERY_GPU_FIELDS = [
  "index",
  "uuid",
  "name",
  "memory.total",
  "driver_version",
  "pci.bus_id",
  "mig.mode.current",
] as const;

export const QUERY_GPU_ARGS = [
  `--query-gpu=${QUERY_GPU_FIELDS.join(",")}`,
  "--format=csv,noheader,nounits",
] as const;

/** One physical GPU as `nvidia-smi --query-gpu` describes it. */
export interface NvidiaGpu {
  index: number;
  uuid: string;
  name: string;
  memoryMiB: number;
  driverVersion: string;
  pciBusId: string;
  /** True when MIG mode is currently enabled; false for "Disabled" and "[N/A]" (no MIG support). */
  migEnabled: boolean;
}

/** One MIG instance as `nvidia-smi -L` lists it under its parent GPU. */
export interface MigInstance {
  parentUuid: string;
  /** The "Device N" number within the parent. */
  deviceIndex: number;
  profile: string;
  uuid: string;
}

/**
 * Parses `nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits`.
 * The seventh column (mig.mode.current) may be absent, which reads as MIG disabled.
 */
export function parseQueryGpuCsv(text: string): NvidiaGpu[] {
  const gpus: NvidiaGpu[] = [];
  for (const [n, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    // A GPU the driver cannot reach (fallen off the bus) is named instead of listed; health reports it.
    if (line.startsWith("Unable to determine the device handle")) continue;
    const cols = line.split(",").map((c) => c.trim());
    if (cols.length < 6) {
      throw invalid(
        `nvidia-smi --query-gpu line ${n + 1} has ${cols.length} columns, expected 6 or 7: "${line}"`,
      );
    }
    const [index, uuid, name, memory, driverVersion, pciBusId, migMode] = cols as [
      string,
      string,
      string,
      string,
      string,
      string,
      string | undefined,
    ];
    const idx = Number(index);
    const mem = Number(memory);
    if (!Number.isInteger(idx) || idx < 0 || index === "") {
      throw invalid(`nvidia-smi --query-gpu line ${n + 1}: index "${index}" is not a number`);
    }
    if (!Number.isFinite(mem) || memory === "") {
      throw invalid(`nvidia-smi --query-gpu line ${n + 1}: memory.total "${memory}" is not a number`);
    }
    if (!uuid.startsWith("GPU-")) {
      throw invalid(`nvidia-smi --query-gpu line ${n + 1}: uuid "${uuid}" does not start with GPU-`);
    }
    gpus.push({
      index: idx,
      uuid,
      name,
      memoryMiB: Math.round(mem),
      driverVersion,
      pciBusId,
      migEnabled: migMode?.toLowerCase() === "enabled",
    });
  }
  return gpus;
}

const GPU_LINE = /^GPU\s+(\d+):\s+(.+?)\s+\(UUID:\s*(GPU-[^)\s]+)\)\s*$/;
// Current drivers print "MIG 1g.10gb Device 0: (UUID: MIG-<uuid>)"; R450–R465 printed
// "MIG 1g.5gb Device 0: (UUID: MIG-GPU-<parent>/<gi>/<ci>)". Both match.
const MIG_LINE = /^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(MIG-[^)\s]+)\)\s*$/;

/** Parses `nvidia-smi -L` into the MIG instances it lists, keyed by their parent GPU. */
export function parseListMig(text: string): MigInstance[] {
  const out: MigInstance[] = [];
  let parent: string | undefined;
  for (const line of text.split("\n")) {
    const gpu = GPU_LINE.exec(line);
    if (gpu) {
      parent = gpu[3];
      continue;
    }
    const mig = MIG_LINE.exec(line);
    if (mig) {
      if (!parent) throw invalid(`nvidia-smi -L lists a MIG device before any GPU: "${line.trim()}"`);
      out.push({ parentUuid: parent, profile: mig[1]!, deviceIndex: Number(mig[2]), uuid: mig[3]! });
    }
  }
  return out;
}

/** Where a MIG device sits in its parent: its GPU instance and compute instance ids. */
export interface MigPlacement {
  /** The parent GPU's index. */
  gpuIndex: number;
  /** The "MIG Dev" column: the "Device N" number `nvidia-smi -L` lists it under. */
  deviceIndex: number;
  gi: number;
  ci: number;
}

// A MIG table row's first cell: "|  0    2   0   0  |" (GPU, GI ID, CI ID, MIG Dev).
const MIG_ROW = /^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|/;

/**
 * Reads the "MIG devices:" table of plain `nvidia-smi`: for each MIG device
 * its parent GPU, GPU instance id, compute instance id and device number.
 * `nvidia-smi -L` names each device's UUID by that device number; together
 * they say which /proc/driver/nvidia/capabilities entries a slice needs.
 */
export function parseMigDeviceTable(text: string): MigPlacement[] {
  const out: MigPlacement[] = [];
  let inTable = false;
  for (const line of text.split("\n")) {
    if (/^\|\s*MIG devices:/.test(line)) {
      inTable = true;
      continue;
    }
    if (!inTable) continue;
    // The table ends at the first line that is no part of a table (the blank before "Processes:").
    if (!/^[|+]/.test(line)) break;
    const m = MIG_ROW.exec(line);
    if (m)
      out.push({ gpuIndex: Number(m[1]), gi: Number(m[2]), ci: Number(m[3]), deviceIndex: Number(m[4]) });
  }
  return out;
}

/** Reads "CUDA Version: 12.2" from the plain `nvidia-smi` header (or `nvidia-smi --version`). */
export function parseCudaVersion(text: string): string | undefined {
  return /CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)*)/.exec(text)?.[1];
}

/**
 * Nominal memory of a MIG profile, from its name: "1g.10gb" → 10 GiB = 10240 MiB.
 * The slice's usable memory is a little less (the driver reserves some); the
 * nominal size is what users ask for and what the profile is called.
 */
export function migProfileMemoryMiB(profile: string): number {
  const m = /^\d+g\.(\d+)gb(?:\+\w+)*$/i.exec(profile);
  if (!m) throw invalid(`unrecognised MIG profile "${profile}" (expected e.g. 1g.10gb)`);
  return Number(m[1]) * 1024;
}

// Words that name the vendor or product line, not the chip.
const BRAND_WORDS = new Set(["NVIDIA", "TESLA", "GEFORCE", "QUADRO", "RTX", "GTX", "GPU"]);
// Words that describe memory size, memory kind, form factor or marketing edition;
// they do not change what the chip is, so they stay out of the type.
const DETAIL_WORDS = new Set(["PCIE", "NVL", "SXM", "HBM", "GENERATION", "EDITION", "SERVER", "WORKSTATION"]);
const DETAIL_PATTERNS = [/^\d+GB$/, /^SXM\d*$/, /^HBM\d*E?$/, /^PCIE\d*$/];

function isDetailWord(w: string): boolean {
  return DETAIL_WORDS.has(w) || DETAIL_PATTERNS.some((p) => p.test(w));
}

/**
 * The scheduling type for a model name: the chip's family, in upper case,
 * without vendor, product line, memory size or form factor.
 *
 *   "NVIDIA H100 80GB HBM3" → "H100"      "NVIDIA A100-SXM4-40GB" → "A100"
 *   "NVIDIA A100 80GB PCIe" → "A100"      "Tesla T4"              → "T4"
 *   "NVIDIA GeForce RTX 4090" → "4090"    "NVIDIA RTX A6000"      → "A6000"
 *   "NVIDIA GeForce RTX 3090 Ti" → "3090-TI"
 *
 * Memory is a separate field (GpuDevice.memoryMiB), so an 80 GB A100 is an
 * "A100" with memoryMiB 81920. `overrides` (exact model name → type) lets an
 * operator rename a model this rule gets wrong.
 */
export function gpuTypeFromModel(model: string, overrides: Record<string, string> = {}): string {
  const override = overrides[model];
  if (override) return override;
  const words = model
    .toUpperCase()
    .split(/[\s-]+/)
    .filter((w) => w.length > 0);
  const kept = words.filter((w) => !BRAND_WORDS.has(w) && !isDetailWord(w));
  // "NVIDIA TITAN RTX" or a name made only of brand words: keep the last word rather than nothing.
  if (kept.length === 0) return words[words.length - 1] ?? model;
  return kept.join("-");
}

/**
 * Combines the query-gpu rows with the MIG instances into schedulable devices.
 * A GPU with MIG enabled is offered only as its MIG instances, never whole.
 */
export function schedulableDevices(
  gpus: NvidiaGpu[],
  migs: MigInstance[],
  overrides: Record<string, string> = {},
  placements: MigPlacement[] = [],
): GpuDevice[] {
  const devices: GpuDevice[] = [];
  for (const gpu of gpus) {
    const type = gpuTypeFromModel(gpu.name, overrides);
    const slices = migs.filter((m) => m.parentUuid === gpu.uuid);
    if (!gpu.migEnabled && slices.length === 0) {
      devices.push({ index: gpu.index, uuid: gpu.uuid, model: gpu.name, type, memoryMiB: gpu.memoryMiB });
      continue;
    }
    for (const m of slices.sort((a, b) => a.deviceIndex - b.deviceIndex)) {
      const at = placements.find((p) => p.gpuIndex === gpu.index && p.deviceIndex === m.deviceIndex);
      devices.push({
        index: gpu.index,
        uuid: m.uuid,
        model: gpu.name,
        type,
        memoryMiB: migProfileMemoryMiB(m.profile),
        mig: { profile: m.profile, parentUuid: gpu.uuid, ...(at ? { gi: at.gi, ci: at.ci } : {}) },
      });
    }
  }
  return devices;
}
