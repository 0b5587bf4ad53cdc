// The MPS control daemon of the shared GPUs, run by the agent when none runs
// for its MPS directory: in a mount namespace of its own whose /dev/shm is
// the directory's shm/ (client containers mount the same one), with the
// directory's pipe/ and log/, serving only the shared GPUs. It outlives the
// agent, as the containers using it do; a restarted agent finds it by its
// pid file and uses it.

import { type CommandRunner, execaRunner, outputSummary } from "./commands.ts";
import { type MpsDaemonState, type MpsPaths, mpsDaemonState } from "./mps.ts";
import { BerthError } from "../../shared/errors.ts";

export interface MpsDaemonOptions {
  /** nvidia-cuda-mps-control's path (requireMpsControl). */
  control: string;
  paths: MpsPaths;
  /** unshare(1). @default "unshare" (on PATH) */
  unshare?: string;
  /** @default execaRunner */
  runner?: CommandRunner;
  /** Environment of the daemon, on top of the MPS variables. @default process.env */
  env?: NodeJS.ProcessEnv;
  /** @default "/proc" */
  procDir?: string;
  /** How long the start may take. @default 30_000 */
  timeoutMs?: number;
}

/**
 * Starts the daemon for `gpuUuids` unless one already runs for the paths;
 * answers the daemon's state afterwards. A start that fails says why.
 */
export async function ensureMpsDaemon(
  o: MpsDaemonOptions,
  gpuUuids: readonly string[],
): Promise<MpsDaemonState> {
  const procDir = o.procDir ?? "/proc";
  const before = mpsDaemonState(o.paths.pipe, procDir);
  if (before.running || gpuUuids.length === 0) return before;
  const runner = o.runner ?? execaRunner;
  // `-d` forks the daemon and returns; the mount namespace is private to it and its servers.
  const r = await runner(
    o.unshare ?? "unshare",
    [
      "--mount",
      "--propagation",
      "private",
      "--",
      "sh",
      "-c",
      'mount --bind "$1" /dev/shm && exec "$2" -d',
      "sh",
      o.paths.shm,
      o.control,
    ],
    {
      timeoutMs: o.timeoutMs ?? 30_000,
      env: {
        ...(o.env ?? process.env),
        CUDA_VISIBLE_DEVICES: gpuUuids.join(","),
        CUDA_MPS_PIPE_DIRECTORY: o.paths.pipe,
        CUDA_MPS_LOG_DIRECTORY: o.paths.log,
      },
    },
  );
  if (r.exitCode !== 0 || r.timedOut || r.spawnError) {
    const why = r.spawnError ?? (r.timedOut ? "timed out" : outputSummary(r) || `exit ${r.exitCode}`);
    throw new BerthError("unavailable", `starting the MPS control daemon for the shared GPUs failed: ${why}`);
  }
  const after = mpsDaemonState(o.paths.pipe, procDir);
  if (!after.running) {
    throw new BerthError("unavailable", `the MPS control daemon did not stay up: ${after.reason}`);
  }
  return after;
}
