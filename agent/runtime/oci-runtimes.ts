// The OCI runtimes a container may run under (docs/runtime.md, "OCI
// runtimes"): runc (the default), crun (the same containers, a smaller and
// faster C binary) and runsc (gVisor: the container's system calls go to a
// user-space kernel instead of the host's). Each keeps its own state root, so
// `list` and `delete` of one never see another's containers.

import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { CgroupLayout } from "./cgroups.ts";
import { Runc } from "./runc.ts";

export const OCI_RUNTIMES = ["runc", "crun", "runsc"] as const;
export type OciRuntimeName = (typeof OCI_RUNTIMES)[number];

/** What a workload asks for: the agent's container runtime (runc or crun), or gVisor. */
export const ISOLATIONS = ["container", "gvisor"] as const;
export type Isolation = (typeof ISOLATIONS)[number];

export function isOciRuntimeName(v: unknown): v is OciRuntimeName {
  return typeof v === "string" && (OCI_RUNTIMES as readonly string[]).includes(v);
}

export function isIsolation(v: unknown): v is Isolation {
  return typeof v === "string" && (ISOLATIONS as readonly string[]).includes(v);
}

/**
 * Flags runsc takes before its command on every call.
 * - file-access=shared: the agent writes into a running container's root
 *   (file uploads) behind gVisor's back; gVisor must not cache it away.
 * - host-uds=open: the container may connect to the host sockets bind-mounted
 *   into it (the agent's bridge: tasks, Output, Queue, Map), and make none.
 */
export const RUNSC_FLAGS = ["--file-access=shared", "--host-uds=open"] as const;

/** How the agent drives one OCI runtime binary. */
export interface OciRuntimeCli {
  name: OciRuntimeName;
  bin: string;
  /** --root of this runtime: one state dir per runtime. */
  root: string;
  /** Global flags before the command (the --root included). */
  globalArgs: string[];
  /** `run --keep` exists: the stopped container and its cgroup stay for OOM counters. */
  keep: boolean;
  /** `exec --tty` exists. */
  tty: boolean;
}

export function ociRuntimeCli(name: OciRuntimeName, bin: string, root: string): OciRuntimeCli {
  const flags = name === "runsc" ? [...RUNSC_FLAGS] : [];
  return {
    name,
    bin,
    root,
    globalArgs: [...flags, "--root", root],
    // crun 1.8 and runsc have no `run --keep`: they delete the container on exit.
    keep: name === "runc",
    tty: name !== "runsc",
  };
}

/** The state root of a runtime under the containers root. */
export function defaultStateRoot(root: string, name: OciRuntimeName): string {
  return join(root, `.${name}`);
}

/**
 * Why crun cannot run containers on this host, or undefined when it can.
 * crun refuses a hybrid cgroup layout (v1 controllers plus a cgroup2 mount
 * with controllers enabled: "cgroups in hybrid mode not supported, drop all
 * controllers from cgroupv2"), so the agent refuses first, saying why.
 */
export function crunRefusal(
  layout: CgroupLayout,
  read = (p: string) => readFileSync(p, "utf8"),
): string | undefined {
  if (layout.version !== 1 || !layout.unifiedMount) return undefined;
  let controllers = "";
  try {
    controllers = read(join(layout.unifiedMount, "cgroup.controllers")).trim();
  } catch {
    return undefined;
  }
  if (!controllers) return undefined;
  return (
    `crun cannot run containers on this host: its cgroups are in hybrid mode (v1 controllers, and the cgroup2 ` +
    `mount at ${layout.unifiedMount} has controllers enabled: ${controllers}), which crun refuses; ` +
    "use runc, or boot the host with cgroup v2 only (systemd.unified_cgroup_hierarchy=1)"
  );
}

/** Whether this runsc can pass NVIDIA GPUs through (its --nvproxy flag); asked once per agent. */
export function runscHasNvproxy(bin: string): boolean {
  // runsc prints its flag list on stderr.
  const r = spawnSync(bin, ["flags"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  return /^\s*-nvproxy\b/m.test(`${r.stdout ?? ""}${r.stderr ?? ""}`);
}

/** The refusal for a GPU container under a runsc without nvproxy. */
export function gvisorGpuRefusal(bin: string): BerthError {
  return new BerthError(
    "failed_precondition",
    `GPUs under gVisor need runsc's nvproxy (runsc --nvproxy), which this agent's runsc (${bin}) does not have; ` +
      'install a gVisor release with nvproxy, or run the GPU workload with isolation="container"',
    { field: "isolation" },
  );
}

/**
 * The agent's OCI runtimes: each one's CLI, made when first used and bound
 * to its state root, and the global flags a container's start needs.
 */
export class OciRuntimeClis {
  private readonly clis = new Map<OciRuntimeName, Runc>();
  private nvproxy?: boolean;

  constructor(
    private readonly bins: Record<OciRuntimeName, string>,
    private readonly stateRoots: Record<OciRuntimeName, string>,
    private readonly cgroups: CgroupLayout,
  ) {}

  /** The CLI of one OCI runtime, bound to its state root. */
  cli(name: OciRuntimeName): Runc {
    let c = this.clis.get(name);
    if (!c) {
      const o = ociRuntimeCli(name, this.bins[name], this.stateRoots[name]);
      c = new Runc(o.bin, o.root, { globalArgs: o.globalArgs, keep: o.keep });
      this.clis.set(name, c);
    }
    return c;
  }

  /**
   * Throws when containers of this runtime cannot run here (crun on a hybrid
   * cgroup host; GPUs under a runsc without nvproxy); else the extra global
   * flags the start needs.
   */
  startFlags(runtime: OciRuntimeName, gpu: boolean, netnsPath: string | undefined): string[] {
    const flags: string[] = [];
    // A container without a netns has only loopback, as under runc. One with
    // berth's netns uses gVisor's hostinet inside that netns (its nftables
    // rules apply): runsc's own netstack refuses to start on kernels that
    // show /proc/sys/net/core/rmem_default in every netns (docs/runtime.md).
    if (runtime === "runsc") flags.push(netnsPath ? "--network=host" : "--network=none");
    if (runtime === "crun") {
      const why = crunRefusal(this.cgroups);
      if (why) throw new BerthError("failed_precondition", why, { field: "runtime" });
    }
    if (runtime === "runsc" && gpu) {
      this.nvproxy ??= runscHasNvproxy(this.bins.runsc);
      if (!this.nvproxy) throw gvisorGpuRefusal(this.bins.runsc);
      flags.push("--nvproxy");
    }
    return flags;
  }
}
