import { existsSync, type FSWatcher, watch } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import type { Cleanup } from "../lib/cleanup.ts";

/** One iteration's two figures, in ms from the request. */
export interface StartSample {
  /** (a) request → the container's process is running (each tool's own marker; see README). */
  runningMs: number;
  /** (b) request → the line `ready` printed by python3 in the container is read on the host. */
  printMs: number;
  /** Sub-steps inside (a)/(b), for profiling: ms from the request, or a count where the key says so. */
  phases?: Record<string, number>;
}

export interface Contender {
  readonly name: string;
  /** Precise definitions of (a) and (b) for this tool, copied into the JSON. */
  readonly method: { running: string; print: string; notes?: string };
  /** Imports the image, starts daemons, ...; throws with the reason it cannot run here. */
  setup(): Promise<void>;
  measure(iteration: number): Promise<StartSample>;
}

export interface BenchContext {
  /** The unpacked debootstrap rootfs (read-only lower dir). */
  rootfs: string;
  /** OCI image layout holding that rootfs as one layer, tag `imageTag`. */
  layout: string;
  imageTag: string;
  /** The container command; it prints READY_LINE and exits 0. */
  args: string[];
  cleanup: Cleanup;
  /** Unique per benchmark run, part of every container name. */
  runId: string;
}

export const READY_LINE = "ready";
export const CONTAINER_ARGS = ["python3", "-c", `print('${READY_LINE}')`];

/** Rejects with `what` after `ms`. */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/**
 * performance.now() when `dir/name` first exists, seen via inotify on `dir`
 * (the same mechanism berth's runtime uses for runc's pid file).
 */
export function fileAppears(dir: string, name: string): { at: Promise<number>; close: () => void } {
  let watcher: FSWatcher | undefined;
  let resolveAt!: (t: number) => void;
  const at = new Promise<number>((r) => {
    resolveAt = r;
  });
  let done = false;
  const check = () => {
    if (!done && existsSync(join(dir, name))) {
      done = true;
      resolveAt(performance.now());
      watcher?.close();
    }
  };
  watcher = watch(dir, { persistent: false }, check);
  watcher.on("error", () => {});
  check();
  return {
    at,
    close: () => {
      done = true;
      watcher?.close();
    },
  };
}
