import type { ChildProcess } from "node:child_process";
import { type FSWatcher, watch } from "node:fs";
import { BerthError } from "../../shared/errors.ts";
import { startFailure } from "./start-failure.ts";
import { type ContainerPaths, readExitFile, readPidFile } from "./state.ts";
import type { Wakeup } from "./wakeup.ts";

/**
 * Waits until runc has started the container's process and returns its pid;
 * throws the start failure (with the container's stderr) if it ended first.
 */
export async function waitForStart(
  c: { id: string; paths: ContainerPaths; child: ChildProcess | undefined; wakeup: Wakeup },
  startTimeoutMs: number,
): Promise<number> {
  const { paths, child } = c;
  const deadline = Date.now() + startTimeoutMs;
  // runc renames the pid file into place and sh writes the exit file: an
  // inotify watch on the bundle dir sees either at once; the poll is a fallback.
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(paths.dir, { persistent: false }, () => c.wakeup.notify());
    watcher.on("error", () => {});
  } catch {
    watcher = undefined;
  }
  try {
    for (;;) {
      const pid = readPidFile(paths.pidFile);
      if (pid) return pid;
      const exit = readExitFile(paths.exitFile);
      const waiterGone = child?.exitCode !== null || child?.signalCode !== null || !child?.pid;
      if (exit || waiterGone) {
        // A quick process may have started and ended between the two reads:
        // runc writes the pid file before it runs the process, so a pid file
        // now means it started (its exit is the caller's to observe).
        const started = readPidFile(paths.pidFile);
        if (started) return started;
        throw startFailure(c.id, paths, exit?.code);
      }
      if (Date.now() > deadline) {
        if (child?.pid) process.kill(-child.pid, "SIGKILL");
        throw new BerthError("unavailable", `container ${c.id}: runc did not start it within ${startTimeoutMs} ms`);
      }
      await c.wakeup.wait(watcher ? 50 : 5);
    }
  } finally {
    watcher?.close();
  }
}
