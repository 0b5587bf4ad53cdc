// Two steps of ContainerHost.runContainer kept apart from it: a runner's
// start-up CPU boost and its end, and GPU injection.

import { describeError } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import type { GpuInjection } from "../capacity/index.ts";
import type { HostGpuInjector, HostLogger, HostRuntime } from "./options.ts";

/**
 * Ends a runner's start-up boost once: at its first ask for a task (`now`),
 * or `afterMs` after the container started (`arm`, called when the runtime
 * has it running; an ask that comes sooner takes effect then).
 */
export function startupEnder(
  runtime: HostRuntime,
  logger: HostLogger,
  id: string,
  afterMs: number,
): { now: () => void; arm: () => void } {
  let [asked, running, done] = [false, false, false];
  let timer: NodeJS.Timeout | undefined;
  const end = () => {
    if (done) return;
    done = true;
    if (timer) clearTimeout(timer);
    try {
      runtime.endStartupCpu?.(id);
    } catch (e) {
      logger.warn({ id, err: describeError(e) }, "cannot end a runner's start-up CPU boost");
    }
  };
  const now = () => {
    asked = true;
    if (running) end();
  };
  const arm = () => {
    running = true;
    if (asked) return end();
    timer = setTimeout(end, afterMs);
    timer.unref();
  };
  return { now, arm };
}

export async function injectGpus(
  injector: HostGpuInjector,
  logger: HostLogger,
  id: string,
  gpus: GpuDevice[],
): Promise<GpuInjection> {
  const injection = await injector.inject(gpus);
  const hooks = Object.entries(injection.hooks).filter(([, list]) => (list?.length ?? 0) > 0);
  if (hooks.length > 0) {
    // ContainerSpec has no hooks field yet: the CDI hooks (ldcache update, symlinks) are not run.
    logger.warn(
      { id, phases: hooks.map(([phase]) => phase) },
      "GPU injection asked for OCI hooks the runtime cannot run; they are skipped",
    );
  }
  return injection;
}
