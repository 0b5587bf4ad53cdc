// Pre-warmed runners (docs/runtime.md, "Pre-warmed runners"): runner
// containers started ahead of demand, with Python running and berth's runner
// imported, waiting on a socket of their bridge directory for a stub. Before
// that they hold no code, no secrets and no stub's environment, and their
// network namespace's port is down. The pool itself is warm-pool.ts's.

import { join } from "node:path";
import { RunnerPaths } from "../../shared/tasks.ts";
import type { ReservedStart } from "./provision.ts";
import { imageUser, mergeEnv, type ResolvedRunRequest } from "./request.ts";
import { applyRunner } from "./runner.ts";
import { startupEnder } from "./startup.ts";
import { type HandedOver, WarmPool, type WarmContainer } from "./warm-pool.ts";

/** The socket a pre-warmed runner waits on, in its bridge directory. */
export const WARM_SOCKET_NAME = "warm.sock";
const WARM_ARGS = ["python3", "-u", "-m", "berth.runtime.warm_runner"];
/** While it waits: little CPU weight (it sleeps on a socket), enough memory for the interpreter. */
const WARM_CPU = 0.25;
const WARM_MEMORY_BYTES = 256 * 1024 * 1024;
const WARM_LABEL = "berth.warm-runner";

/**
 * What a pooled container cannot take once started, for any kind: its
 * program, GPUs, mounts, gVisor, a workspace's opt-outs, its own user,
 * hostname, working directory, start-up window or gang. Undefined: none.
 */
export function startedIneligible(req: ResolvedRunRequest, mounts: number): string | undefined {
  if (req.gpu && (req.gpu.count ?? 0) > 0) return "GPUs";
  if (mounts > 0 || req.volumes.length > 0 || req.buckets.length > 0) return "mounts";
  if (req.isolation === "gvisor") return "gVisor";
  // Pooled containers start with the defaults: a workspace opted out of either starts cold.
  if (req.userNamespace === false) return "no user namespace";
  if (req.syscallFilter === "denylist") return "the deny-list system call filter";
  if (req.user || req.hostname || req.cwd) return "its own user, hostname or working directory";
  if (req.startupWindowMs) return "a start-up window";
  // A started container's environment is fixed: the gang's (gangEnv) cannot be added after.
  if (req.gang) return "a gang member";
  return undefined;
}

/** Why a request cannot take a pre-warmed runner (undefined: it can). */
export function warmIneligible(req: ResolvedRunRequest, mounts: number): string | undefined {
  if (!req.runner) return "not a runner";
  if (req.args.length > 0) return "its own program";
  return startedIneligible(req, mounts);
}

export class WarmRunners extends WarmPool {
  protected readonly what = "pre-warmed runner";
  protected readonly idPrefix = "warm-";

  protected get imageRef(): string | undefined {
    return this.d.options.warmRunnerImage;
  }

  ineligible(req: ResolvedRunRequest, mounts: number): string | undefined {
    return warmIneligible(req, mounts);
  }

  protected prepare(w: Omit<WarmContainer, "server" | "socketPath">) {
    const { options, bridges } = this.d;
    const { id, image, net, hostsFile } = w;
    const bridgeDir = bridges.makeDir(id);
    const spec = {
      id,
      image: { rootfs: image.layers },
      args: WARM_ARGS,
      env: mergeEnv(image.config.env, {
        BERTH_REMOTE: "1",
        BERTH_WARM_SOCKET: `${RunnerPaths.bridgeDir}/${WARM_SOCKET_NAME}`,
        PYTHONPATH: RunnerPaths.sdk,
      }),
      cwd: "/",
      user: imageUser(image.config.user) ?? { uid: 0, gid: 0 },
      cpu: WARM_CPU,
      ...(options.runnerStartupCpu > WARM_CPU ? { startupCpu: options.runnerStartupCpu } : {}),
      memoryBytes: WARM_MEMORY_BYTES,
      mounts: [
        { source: bridgeDir, destination: RunnerPaths.bridgeDir, readonly: false, idmapped: true },
        { source: options.sdkDir, destination: RunnerPaths.sdk, readonly: true },
        { source: net.resolvConfPath, destination: "/etc/resolv.conf", readonly: true },
        { source: hostsFile, destination: "/etc/hosts", readonly: true },
      ],
      netnsPath: net.netnsPath,
      labels: { [WARM_LABEL]: "1" },
      codeSlot: RunnerPaths.code,
      // As every container whose workspace did not opt out (warmIneligible turns those away).
      userNamespace: true,
    };
    return { spec, socketPath: join(bridgeDir, WARM_SOCKET_NAME) };
  }

  protected unprepare(id: string): void {
    this.d.bridges.removeDir(id);
  }

  protected override startupCpu(req: ResolvedRunRequest): number | undefined {
    const boost = this.d.options.runnerStartupCpu;
    return boost > req.cpu ? boost : undefined;
  }

  /**
   * The runner's part: its bridge directory (mounted already) served for the
   * stub under the new id, the code on its slot, the start-up CPU boost; the
   * user's module is imported only once the environment arrives.
   */
  protected async handOver(
    w: WarmContainer,
    r: ReservedStart,
    undo: { what: string; fn: () => unknown }[],
  ): Promise<HandedOver> {
    const { options, runtime, bridges } = this.d;
    const { req, codeDir } = r;
    const runner = req.runner;
    if (!runner || !runtime.mountCode) throw new Error("not a runner request");
    const endStartup =
      this.startupCpu(req) === undefined
        ? undefined
        : startupEnder(runtime, options.logger, req.id, options.runnerStartupMs);
    undo.push({ what: "task bridge", fn: () => bridges.close(req.id) });
    const bridgeDir = await bridges.adopt(w.id, req.id, runner, endStartup?.now);
    const run = applyRunner(req, runner, { codeDir, bridgeDir, sdkDir: options.sdkDir });
    if (codeDir) await runtime.mountCode(w.id, codeDir);
    return { req: run.req, ...(endStartup ? { endStartup } : {}) };
  }
}
