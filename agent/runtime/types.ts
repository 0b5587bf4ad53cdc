// The runtime's public vocabulary. Other agent subsystems (images, network,
// capacity) hand their results in through these plain fields; the runtime
// imports none of them.

import type { OciRuntimeName } from "./oci-runtimes.ts";
import type { OciHooks } from "./oci-types.ts";

/** A host path bind-mounted into the container. */
export interface BindMount {
  source: string;
  destination: string;
  /** @default false */
  readonly?: boolean;
  /** Extra mount options appended after the defaults (e.g. "nosuid"). */
  options?: string[];
  /**
   * A tree containers share (a volume): in a container with a user
   * namespace, mounted through its id mapping, so root inside reads and
   * writes it as the host's root does. Other bind mounts are not mapped:
   * root inside is an unprivileged stranger to them. @default false
   */
  idmapped?: boolean;
}

/** A device node created inside the container (e.g. /dev/nvidia0). */
export interface DeviceNode {
  path: string;
  type: "c" | "b";
  major: number;
  minor: number;
  /** @default 0o666 */
  fileMode?: number;
  /** @default 0 */
  uid?: number;
  /** @default 0 */
  gid?: number;
}

/** A devices-cgroup rule; an absent major/minor means "any" (`*`). */
export interface DeviceRule {
  allow: boolean;
  type: "a" | "c" | "b";
  major?: number;
  minor?: number;
  /** Any of "r", "w", "m". @default "rwm" */
  access?: string;
}

/** A container's seccomp profile (ContainerSpec.seccomp). */
import type { SeccompFilter } from "./seccomp.ts";

export type { SeccompFilter };

/** eth0's configuration in a container's network namespace. */
export interface NetnsAddresses {
  /** e.g. 10.88.0.5/16 */
  ipv4?: string;
  /** e.g. fd00:88::5/64 */
  ipv6?: string;
  gateway4?: string;
  gateway6?: string;
  /** A gang member's address on GANG_IFACE, e.g. 10.251.0.2/24 (shared/gang.ts). */
  gang4?: string;
}

export interface ContainerSpec {
  /** Letters, digits, `_ . -`; at most 128 characters; unique per runtime root. */
  id: string;
  /**
   * Read-only image root(s), as produced by the image store. A list is an
   * overlay stack, uppermost layer first.
   */
  image: { rootfs: string | string[] };
  args: string[];
  /** PATH is added when missing. */
  env?: Record<string, string>;
  /** @default "/" */
  cwd?: string;
  /** @default { uid: 0, gid: 0 } */
  user?: { uid: number; gid: number; additionalGids?: number[] };
  /** @default the container id, cut to 63 characters */
  hostname?: string;
  /** CPU cores, fractional allowed (0.5 = half a core). At least 0.01. */
  cpu: number;
  /**
   * A higher CPU cap (cores) for the container's start-up, until
   * ContainerRuntime.endStartupCpu(id) sets the cap to `cpu`. The CFS share
   * stays that of `cpu`, so the boost uses only cores others leave idle.
   * @default no boost
   */
  startupCpu?: number;
  /** Memory limit in bytes (swap is disabled where the host accounts it). At least 6 MiB. */
  memoryBytes: number;
  /** @default 4096 */
  pidsLimit?: number;
  /** Size of /dev/shm (a tmpfs whose pages count against the memory limit). @default memoryBytes */
  shmBytes?: number;
  /** Size of the /tmp tmpfs (its pages count against memoryBytes). @default memoryBytes */
  tmpBytes?: number;
  mounts?: BindMount[];
  /** Join this network namespace (e.g. /run/netns/x); without it the container gets a fresh, empty one. */
  netnsPath?: string;
  /**
   * With netnsPath and a user namespace: eth0's addresses (CIDR) and default
   * gateways in that namespace, which the hook moving eth0 into the
   * container's own namespace applies again (a move drops them). Without
   * them the hook reads them first, at the cost of a few more processes.
   */
  netnsAddresses?: NetnsAddresses;
  extraDevices?: DeviceNode[];
  extraDeviceRules?: DeviceRule[];
  /**
   * OCI hooks, written to config.json as given: GPU injection's (the NVIDIA toolkit's CDI hooks,
   * or the agent's own ld cache hook; docs/gpus.md). Each path must be an absolute host path.
   */
  hooks?: OciHooks;
  labels?: Record<string, string>;
  /** Kill the container (reason "timed_out") once it has run this long. */
  timeoutMs?: number;
  /**
   * When set, run() waits up to this long after start; if the container
   * exits non-zero within it, run() rejects with its stderr and removes it.
   * @default 0 (run() returns as soon as the process is started)
   */
  startupWindowMs?: number;
  /**
   * Start by `runc restore` from the CRIU images in this directory (a
   * `runc checkpoint --image-path`) instead of `runc run`: the processes
   * carry on where the checkpoint left them, and args/env/cwd/user are not used.
   * @default a fresh start
   */
  restoreFrom?: string;
  /**
   * The OCI runtime: runc, crun, or runsc (gVisor; docs/runtime.md, "OCI
   * runtimes"). @default the runtime's defaultRuntime
   */
  runtime?: OciRuntimeName;
  /**
   * The seccomp profile: "allowlist" refuses every system call not on its
   * allow list; "denylist" is the older profile, which allows all but a deny
   * list (a workspace opted out, docs/limits.md). @default "allowlist"
   */
  seccomp?: SeccompFilter;
  /**
   * A path inside the container, empty at start, where
   * ContainerRuntime.mountCode() mounts a code tree later, while the
   * container runs (a pre-warmed runner's /mnt/code). @default none
   */
  codeSlot?: string;
  /**
   * Run in a user namespace: root inside is an unprivileged host uid from a
   * range no other container of this host holds (docs/runtime.md, "User
   * namespaces"). Ignored by gVisor, whose sandbox is its own kernel.
   * @default false
   */
  userNamespace?: boolean;
}

export type ContainerStatus = "created" | "running" | "stopped";

/**
 * - exited: the process ended on its own (or after honouring SIGTERM) with exitCode
 * - oom_killed: the memory cgroup OOM-killed a process and the container ended non-zero
 * - killed: ended by a signal (exitCode 128+signo), e.g. SIGKILL after stop()'s grace
 * - timed_out: berth killed it because it ran past spec.timeoutMs
 * - unknown: the waiter that records the exit status was lost (exitCode -1)
 */
export type ExitReason = "exited" | "oom_killed" | "killed" | "timed_out" | "unknown";

/** What a container's limits refused (ContainerRuntime.limits): for naming why a task inside it failed. */
export interface ContainerLimits {
  /** Its disk quota (undefined: the agent runs without one). */
  disk?: { sizeBytes: number; freeBytes: number; full: boolean };
  /** Its pids cgroup: pids.max (null: unlimited) and forks refused at it so far (undefined: not counted by this kernel). */
  pids: { limit: number | null; refused?: number };
}

export interface ContainerInfo {
  id: string;
  /** Host pid of the container's init; 0 before start. */
  pid: number;
  status: ContainerStatus;
  /** ms since epoch */
  createdAt: number;
  startedAt?: number;
  exitedAt?: number;
  exitCode?: number;
  reason?: ExitReason;
  labels: Record<string, string>;
  /** The OCI runtime it runs under. */
  runtime: OciRuntimeName;
}

export type ContainerEvent =
  | { type: "start"; containerId: string; pid: number; at: number }
  | {
      type: "exit";
      containerId: string;
      exitCode: number;
      reason: ExitReason;
      at: number;
      /** Last few KiB of stderr, for error reports. */
      stderrTail: string;
    };

export interface LogLine {
  containerId: string;
  stream: "stdout" | "stderr";
  line: string;
  /** ms since epoch when the agent read the line */
  ts: number;
}

/** Minimal logger shape (pino-compatible). */
export interface RuntimeLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}
