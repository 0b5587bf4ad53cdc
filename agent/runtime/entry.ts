// What ContainerRuntime keeps per container, and the steps on one container
// that need nothing else of the runtime: its log followers, its signals, its
// saved metadata, and whether it has exited.

import type { ChildProcess } from "node:child_process";
import { describeError } from "../../shared/errors.ts";
import { LogFollower } from "./logs.ts";
import { type ContainerMeta, type ContainerPaths, processAlive, readExitFile, writeMeta } from "./state.ts";
import type { ContainerEvent, ContainerInfo, LogLine, RuntimeLogger } from "./types.ts";
import { Wakeup } from "./wakeup.ts";

export interface ContainerEntry {
  meta: ContainerMeta;
  paths: ContainerPaths;
  status: ContainerInfo["status"];
  child?: ChildProcess;
  logs?: { stdout: LogFollower; stderr: LogFollower };
  wakeup: Wakeup;
  finalizing?: Promise<void>;
  /** Set while run() waits out spec.startupWindowMs: events are held back. */
  heldEvents?: ContainerEvent[];
  persistedOffsets: string;
  persistedAt: number;
}

export function newEntry(
  meta: ContainerMeta,
  paths: ContainerPaths,
  status: ContainerInfo["status"],
): ContainerEntry {
  return { meta, paths, status, wakeup: new Wakeup(), persistedOffsets: "", persistedAt: 0 };
}

/** Follows the container's stdout and stderr spools from the saved offsets. */
export function startEntryLogs(
  entry: ContainerEntry,
  o: { onLog: (line: LogLine) => void; maxLogSpoolBytes: number },
): void {
  const make = (stream: "stdout" | "stderr") =>
    new LogFollower({
      path: entry.paths[stream],
      containerId: entry.meta.spec.id,
      stream,
      offset: entry.meta.logOffsets[stream],
      onLine: o.onLog,
      maxSpoolBytes: o.maxLogSpoolBytes,
    });
  entry.logs = { stdout: make("stdout"), stderr: make("stderr") };
  entry.logs.stdout.watch();
  entry.logs.stderr.watch();
}

export function signalEntry(entry: ContainerEntry, sig: NodeJS.Signals): void {
  // Once the exit is seen the pid may be reused: never signal it again.
  if (entry.status !== "running" || entry.finalizing || !entry.meta.pid) return;
  try {
    process.kill(entry.meta.pid, sig);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e;
  }
}

/** Saves the metadata with the followers' offsets; a failure is logged, not thrown. */
export function persistEntryMeta(entry: ContainerEntry, logger: RuntimeLogger | undefined): void {
  if (entry.logs) {
    entry.meta.logOffsets = { stdout: entry.logs.stdout.offset, stderr: entry.logs.stderr.offset };
  }
  entry.persistedOffsets = `${entry.meta.logOffsets.stdout}:${entry.meta.logOffsets.stderr}`;
  entry.persistedAt = Date.now();
  try {
    writeMeta(entry.paths.meta, entry.meta);
  } catch (e) {
    logger?.error({ id: entry.meta.spec.id, err: describeError(e) }, "saving container metadata");
  }
}

/** The running container's exit, once it can be known; undefined while it may still be running. */
export function observedExit(entry: ContainerEntry): { code: number; at: number } | undefined {
  const exit = readExitFile(entry.paths.exitFile);
  if (exit) return exit;
  // No status yet. If the waiter is gone too (killed with the agent's
  // cgroup, say), the code is lost: wait for the init process itself.
  const waiterAlive = entry.child
    ? entry.child.exitCode === null && entry.child.signalCode === null
    : processAlive(entry.meta.waiterPid);
  if (!waiterAlive && !readExitFile(entry.paths.exitFile) && !processAlive(entry.meta.pid)) {
    return { code: -1, at: Date.now() };
  }
  return undefined;
}
