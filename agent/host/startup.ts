// Two steps of ContainerHost.runContainer kept apart from it: a runner's
// start-up CPU boost and its end, and GPU injection.

import { accessSync, constants } from "node:fs";
import { BerthError, describeError } from "../../shared/errors.ts";
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

/**
 * The container's GPU injection. Its hooks (the toolkit's CDI hooks: ld cache, `libcuda.so`
 * links, CUDA compat; or the agent's own ld cache hook) go into the container's OCI config and
 * run there (buildContainerSpec); a hook whose program is not on this host is refused here,
 * before anything starts, rather than left to fail inside runc.
 */
export async function injectGpus(
  injector: HostGpuInjector,
  logger: HostLogger,
  id: string,
  gpus: GpuDevice[],
  sharedMemoryMiB?: number,
): Promise<GpuInjection> {
  const injection = await injector.inject(
    gpus,
    sharedMemoryMiB !== undefined ? { sharedMemoryMiB } : undefined,
  );
  for (const [phase, list] of Object.entries(injection.hooks)) {
    for (const hook of list ?? []) {
      try {
        accessSync(hook.path, constants.X_OK);
      } catch {
        throw new BerthError(
          "failed_precondition",
          `the GPUs' ${phase} hook ${hook.path} (${hook.args?.slice(1, 3).join(" ") ?? ""}) is not an executable ` +
            "on this host: it makes the driver libraries loadable in the container (ld cache, libcuda.so links). " +
            "Reinstall the NVIDIA container toolkit (nvidia-ctk), or regenerate the CDI spec the agent reads",
          { id },
        );
      }
    }
  }
  logger.info(
    {
      id,
      hooks: Object.values(injection.hooks).flatMap((l) =>
        (l ?? []).map((h) => h.args?.slice(0, 3).join(" ")),
      ),
    },
    "GPU injection ready",
  );
  return injection;
}
