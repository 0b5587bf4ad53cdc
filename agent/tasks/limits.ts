// Naming the container limit a failed task ran into (docs/reliability.md,
// "containers that hang, run out of memory, pids or disk"): its pids cgroup
// refused a fork while it ran, or its disk quota is full. The runtime reads
// the counters (ContainerLimitsReader); this decides what they mean.

import { describeError } from "../../shared/errors.ts";
import type { TaskError } from "../../shared/tasks.ts";
import type { ResultBody } from "./result.ts";
import type { ContainerLimitState, ContainerLimitsReader, Slot, TaskWorkerLogger } from "./types.ts";

/** A container limit a failed task ran into: its reason and the error that replaces the task's own. */
export interface LimitHit {
  reason: "disk_full" | "pids_exhausted";
  error: TaskError;
}

const size = (bytes: number): string =>
  bytes >= 2 ** 30 ? `${+(bytes / 2 ** 30).toFixed(1)} GiB` : `${+(bytes / 2 ** 20).toFixed(1)} MiB`;

/**
 * Why a task that raised `raised` failed, when a container limit explains
 * it: its pids cgroup refused a fork while it ran (`refusedBefore`: the
 * counter after the previous task), or its disk is full. The task's own
 * exception stays in the message and its traceback is kept; the pickled
 * exception is dropped, so the caller sees the limit (RemoteError PidsExhausted),
 * as for an OOM kill.
 */
export function limitHit(
  state: ContainerLimitState | undefined,
  refusedBefore: number | undefined,
  raised: TaskError,
  own = `the task raised ${raised.type}${raised.message ? `: ${raised.message}` : ""}`,
): LimitHit | undefined {
  const refused = state?.pids.refused;
  if (refused !== undefined && refused > (refusedBefore ?? 0)) {
    const limit = state?.pids.limit;
    return {
      reason: "pids_exhausted",
      error: {
        type: "PidsExhausted",
        message: `the container reached its pids limit${limit === null || limit === undefined ? "" : ` of ${limit}`}: the kernel refused ${refused - (refusedBefore ?? 0)} fork(s) or thread(s) while the task ran; ${own}`,
        traceback: raised.traceback,
      },
    };
  }
  const disk = state?.disk;
  if (disk?.full) {
    return {
      reason: "disk_full",
      error: {
        type: "DiskFull",
        message: `the container's disk of ${size(disk.sizeBytes)} is full (${size(disk.freeBytes)} free); ${own}`,
        traceback: raised.traceback,
      },
    };
  }
  return undefined;
}

/**
 * The container limit a failed result ran into, if any. Every result moves
 * the slot's refused-forks baseline on, so only forks refused during this
 * task (or, with several workers, beside it) count against it.
 */
export function limitOfResult(
  reader: ContainerLimitsReader | undefined,
  slot: Slot,
  r: ResultBody,
  log: TaskWorkerLogger,
): LimitHit | undefined {
  const before = slot.pidsRefused;
  if (r.status !== "FAILED") {
    slot.pidsRefused = readLimit(reader, log, slot.containerId, (l, id) => l.pidsRefused(id));
    return undefined;
  }
  const state = readLimit(reader, log, slot.containerId, (l, id) => l.limits(id));
  slot.pidsRefused = state?.pids.refused;
  return limitHit(state, before, r.error);
}

/**
 * The container limit a task whose container died under it ran into, if
 * any (an OOM kill is the runtime's exit reason and comes first): forks
 * refused since the container's last answered task, or a full disk. Read
 * at the exit event, before the container is removed.
 */
export function limitOfCrash(
  reader: ContainerLimitsReader | undefined,
  slot: Slot,
  code: string,
  log: TaskWorkerLogger,
): LimitHit | undefined {
  const state = readLimit(reader, log, slot.containerId, (l, id) => l.limits(id));
  const exited = `its container exited with code ${code}`;
  return limitHit(
    state,
    slot.pidsRefused,
    { type: "ContainerExited", message: exited, traceback: "" },
    exited,
  );
}

/** A read of the container's limits; undefined (and logged) when it fails: the task keeps its own error. */
export function readLimit<T>(
  reader: ContainerLimitsReader | undefined,
  log: TaskWorkerLogger,
  containerId: string,
  read: (l: ContainerLimitsReader, id: string) => T | undefined,
): T | undefined {
  if (!reader) return undefined;
  try {
    return read(reader, containerId);
  } catch (e) {
    log.warn({ containerId, err: describeError(e) }, "cannot read a runner container's limits");
    return undefined;
  }
}
