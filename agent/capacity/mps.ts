// Shared GPUs: the operator marks GPUs shareable (`berth agent
// --shared-gpus`), and containers given part of one run as clients of the
// NVIDIA MPS control daemon, each held to its memory share and a matching
// share of the GPU's threads. Pure computations over the MPS directory; the
// injector (gpu-injection.ts) adds what they return to a container.

import { readFileSync } from "node:fs";
import { findExecutable } from "./commands.ts";
import { join } from "node:path";
import { BerthError, invalid } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import type { GpuMount } from "./injection-types.ts";

/** The MPS control program; without it on PATH no GPU can be shared. */
export const MPS_CONTROL = "nvidia-cuda-mps-control";

/** Where the agent keeps MPS's pipes, shared memory and logs. @see MpsPaths */
export const DEFAULT_MPS_DIR = "/run/berth/mps";

/** Where a client container finds the MPS pipes (MPS's own default pipe directory). */
export const CONTAINER_MPS_PIPE_DIR = "/tmp/nvidia-mps";

/**
 * The MPS directory's layout: `pipe/` is the daemon's CUDA_MPS_PIPE_DIRECTORY
 * (its sockets and nvidia-cuda-mps-control.pid), `shm/` the daemon's
 * /dev/shm (clients exchange memory with the server there, so each client
 * container mounts it as its /dev/shm), `log/` its CUDA_MPS_LOG_DIRECTORY.
 */
export interface MpsPaths {
  pipe: string;
  shm: string;
  log: string;
}

export function mpsPaths(dir: string): MpsPaths {
  return { pipe: join(dir, "pipe"), shm: join(dir, "shm"), log: join(dir, "log") };
}

/** Which GPUs are shared: every whole GPU, or these indexes. */
export type SharedGpuSelection = "all" | number[];

/** Parses `--shared-gpus`: "all", or GPU indexes as nvidia-smi numbers them ("0,1"). */
export function parseSharedGpus(text: string): SharedGpuSelection {
  const t = text.trim();
  if (t === "all") return "all";
  const parts = t.split(",").map((p) => p.trim());
  if (parts.length === 0 || parts.some((p) => !/^\d+$/.test(p))) {
    throw invalid(`--shared-gpus must be "all" or GPU indexes such as "0,1", got ${JSON.stringify(text)}`, {
      field: "sharedGpus",
    });
  }
  return [...new Set(parts.map(Number))].sort((a, b) => a - b);
}

/**
 * Marks the selected whole GPUs `shared`. A GPU in MIG mode is offered as
 * its slices and never shared; its index in the selection is ignored.
 */
export function markShared(devices: GpuDevice[], selection: SharedGpuSelection | undefined): GpuDevice[] {
  if (!selection) return devices;
  return devices.map((d) =>
    !d.mig && (selection === "all" || selection.includes(d.index)) ? { ...d, shared: true } : d,
  );
}

/**
 * The agent's check at start: GPUs marked shared need the MPS control
 * program, else the agent refuses to start rather than offer GPUs it cannot
 * share. Returns the program's path.
 */
export function requireMpsControl(path: string | undefined): string {
  const found = findExecutable(MPS_CONTROL, path);
  if (!found) {
    throw new BerthError(
      "failed_precondition",
      `--shared-gpus needs NVIDIA MPS, but ${MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver's utilities); install it or start the agent without --shared-gpus`,
    );
  }
  return found;
}

/** Whether the MPS control daemon of `pipeDir` runs: its pid file names a live nvidia-cuda-mps-control. */
export type MpsDaemonState = { running: true; pid: number } | { running: false; reason: string };

export function mpsDaemonState(pipeDir: string, procDir = "/proc"): MpsDaemonState {
  const pidFile = join(pipeDir, "nvidia-cuda-mps-control.pid");
  let text: string;
  try {
    text = readFileSync(pidFile, "utf8");
  } catch {
    return { running: false, reason: `no MPS control daemon runs for ${pipeDir} (${pidFile} is missing)` };
  }
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) {
    return { running: false, reason: `${pidFile} holds no process id: ${JSON.stringify(text.trim())}` };
  }
  let cmdline: string;
  try {
    cmdline = readFileSync(join(procDir, String(pid), "cmdline"), "utf8");
  } catch {
    return { running: false, reason: `the MPS control daemon of ${pipeDir} (pid ${pid}) is not running` };
  }
  if (!cmdline.includes(MPS_CONTROL)) {
    return { running: false, reason: `pid ${pid} of ${pidFile} is not ${MPS_CONTROL}` };
  }
  return { running: true, pid };
}

/**
 * The share of the GPU's threads a client gets: its share of the memory,
 * rounded up, at least 1% (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
 */
export function mpsThreadPercentage(memoryMiB: number, gpuMemoryMiB: number): number {
  if (gpuMemoryMiB <= 0) return 100;
  return Math.min(100, Math.max(1, Math.ceil((100 * memoryMiB) / gpuMemoryMiB)));
}

export interface MpsClientInjection {
  env: Record<string, string>;
  mounts: GpuMount[];
}

/**
 * What a container given `memoryMiB` of the shared GPU `device` adds to its
 * GPU injection: the MPS pipe directory and the daemon's shared memory, the
 * GPU pinned by UUID (the MPS server may see several), its memory limit and
 * its thread share. Refuses a GPU that is not shared, a share larger than
 * the GPU, and a host whose MPS daemon does not run.
 */
export function mpsClientInjection(
  device: GpuDevice,
  memoryMiB: number,
  paths: MpsPaths,
  daemon: MpsDaemonState,
): MpsClientInjection {
  if (!device.shared) {
    throw new BerthError(
      "invalid_request",
      `GPU ${device.uuid} is not shared; gpu_memory needs a shared GPU`,
      {
        uuid: device.uuid,
      },
    );
  }
  if (!Number.isInteger(memoryMiB) || memoryMiB <= 0 || memoryMiB > device.memoryMiB) {
    throw new BerthError(
      "invalid_request",
      `gpu_memory ${memoryMiB} MiB does not fit GPU ${device.index} (${device.memoryMiB} MiB)`,
      { uuid: device.uuid },
    );
  }
  if (!daemon.running) {
    throw new BerthError(
      "failed_precondition",
      `GPU ${device.index} is shared but NVIDIA MPS is not available: ${daemon.reason}`,
      { uuid: device.uuid },
    );
  }
  const rw = ["rw", "nosuid", "nodev", "bind"];
  return {
    env: {
      CUDA_VISIBLE_DEVICES: device.uuid,
      CUDA_MPS_PIPE_DIRECTORY: CONTAINER_MPS_PIPE_DIR,
      // Device 0 is the one GPU the client sees.
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: `0=${memoryMiB}M`,
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: String(mpsThreadPercentage(memoryMiB, device.memoryMiB)),
    },
    mounts: [
      { source: paths.pipe, destination: CONTAINER_MPS_PIPE_DIR, type: "bind", options: [...rw] },
      { source: paths.shm, destination: "/dev/shm", type: "bind", options: [...rw] },
    ],
  };
}
