// Pre-warmed sandboxes (docs/sandboxes.md and docs/runtime.md, "Pre-warmed
// sandboxes"): sandbox containers of the default image started ahead of
// demand, their pid 1 the process server (sandbox-init.ts) already listening
// on its socket but serving nothing until the agent sends it the sandbox's
// environment on `warm.sock` in the same directory. Before that they hold no
// workspace's env, secrets, mounts or bridge, and their network namespace's
// port is down. The pool itself is warm-pool.ts's.

import { chownSync } from "node:fs";
import { join, posix } from "node:path";
import { RunnerPaths } from "../../shared/tasks.ts";
import type { ContainerSpec } from "../runtime/index.ts";
import type { ReservedStart } from "./provision.ts";
import { imageUser, mergeEnv, type ResolvedRunRequest } from "./request.ts";
import { applyRunner } from "./runner.ts";
import { SANDBOX_INIT_LABEL, SandboxInitPaths } from "./sandbox-init.ts";
import { type HandedOver, WarmPool, type WarmContainer } from "./warm-pool.ts";
import { startedIneligible } from "./warm-runners.ts";

const WARM_SOCKET_NAME = "warm.sock";
/** While it waits: the least CPU weight (it sleeps in select()), enough memory for the server. */
const WARM_CPU = 0.1;
const WARM_STARTUP_CPU = 1;
const WARM_MEMORY_BYTES = 64 * 1024 * 1024;
const WARM_LABEL = "berth.warm-sandbox";

/** Why a request cannot take a pre-warmed sandbox (undefined: it can). */
export function warmSandboxIneligible(req: ResolvedRunRequest, mounts: number): string | undefined {
  if (req.runner) return "a runner";
  // A pod's entrypoint, or a sandbox whose pid 1 must stay its own.
  if (req.labels[SANDBOX_INIT_LABEL] !== "1") return "not a sandbox with a process server";
  // A sandbox's code is a lower layer of its root, fixed at start.
  if (req.code) return "code";
  return startedIneligible(req, mounts);
}

export class WarmSandboxes extends WarmPool {
  protected readonly what = "pre-warmed sandbox";
  protected readonly idPrefix = "warm-sbx-";
  /** The default image: what a sandbox created without one runs. */
  protected readonly imageRef = undefined;

  ineligible(req: ResolvedRunRequest, mounts: number): string | undefined {
    return warmSandboxIneligible(req, mounts);
  }

  protected prepare(w: Omit<WarmContainer, "server" | "socketPath">) {
    const { options, bridges, inits } = this.d;
    const { id, image, net, hostsFile } = w;
    // Empty until a sandbox of a workspace with a bridge takes it (its socket appears then).
    const bridgeDir = bridges.makeDir(id);
    const user = imageUser(image.config.user) ?? { uid: 0, gid: 0 };
    const spec: ContainerSpec = {
      id,
      image: { rootfs: image.layers },
      args: [],
      env: mergeEnv(image.config.env, {}),
      cwd: image.config.workingDir || "/",
      user,
      cpu: WARM_CPU,
      // Its shares are WARM_CPU's; the cap is a core's, so python3 starts quickly (runc update lowers it).
      startupCpu: WARM_STARTUP_CPU,
      memoryBytes: WARM_MEMORY_BYTES,
      mounts: [
        { source: bridgeDir, destination: RunnerPaths.bridgeDir, readonly: false, idmapped: true },
        { source: net.resolvConfPath, destination: "/etc/resolv.conf", readonly: true },
        { source: hostsFile, destination: "/etc/hosts", readonly: true },
      ],
      netnsPath: net.netnsPath,
      labels: { [WARM_LABEL]: "1", [SANDBOX_INIT_LABEL]: "1" },
      // As every sandbox whose workspace did not opt out (warmSandboxIneligible turns those away).
      userNamespace: true,
    };
    if (!inits.prepare(spec, options.sdkDir)) {
      bridges.removeDir(id);
      throw new Error(`image ${image.ref} has no python3 to run the sandbox process server`);
    }
    spec.args.push("--warm", posix.join(SandboxInitPaths.dir, WARM_SOCKET_NAME));
    return { spec, socketPath: join(inits.dirOf(id), WARM_SOCKET_NAME) };
  }

  protected unprepare(id: string): void {
    this.d.bridges.removeDir(id);
    this.d.inits.close(id);
  }

  protected override listening(socketPath: string, spec: ContainerSpec): void {
    // The server runs as the image's user; the directory is that user's already.
    const user = spec.user ?? { uid: 0, gid: 0 };
    chownSync(socketPath, user.uid, user.gid);
  }

  /**
   * The sandbox's part: its process server's directory and its bridge
   * directory (both mounted already) renamed to the sandbox's id, the
   * workspace bridge served there, BERTH_CONTAINER_ID and the socket in its env.
   */
  protected async handOver(
    w: WarmContainer,
    r: ReservedStart,
    undo: { what: string; fn: () => unknown }[],
  ): Promise<HandedOver> {
    const { options, bridges, inits } = this.d;
    const { req } = r;
    undo.push({ what: "sandbox init directory", fn: () => inits.close(req.id) });
    inits.adopt(w.id, req.id);
    undo.push({ what: "workspace bridge", fn: () => bridges.close(req.id) });
    const bridgeDir = await bridges.adoptWorkspace(w.id, req.id, req.bridge?.workspaceId);
    const run = applyRunner(req, undefined, { ...(bridgeDir ? { bridgeDir } : {}), sdkDir: options.sdkDir });
    return { req: run.req };
  }
}
