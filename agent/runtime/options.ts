import { join, resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import { DEFAULT_CONTAINER_DISK_BYTES, MIN_DISK_BYTES } from "./disk.ts";
import { defaultStateRoot, isOciRuntimeName, OCI_RUNTIMES, type OciRuntimeName } from "./oci-runtimes.ts";
import type { ContainerEvent, LogLine, RuntimeLogger } from "./types.ts";

export interface ContainerRuntimeOptions {
  /** <agentDataDir>/containers: one bundle dir per container. */
  root: string;
  /** runc --root. @default <root>/.runc */
  runcRoot?: string;
  /** @default "runc" */
  runc?: string;
  /** The crun binary. @default "crun" */
  crun?: string;
  /** The runsc (gVisor) binary. @default "runsc" */
  runsc?: string;
  /**
   * The OCI runtime of containers whose spec names none (docs/runtime.md,
   * "OCI runtimes"); gVisor containers always run under runsc. @default "runc"
   */
  defaultRuntime?: OciRuntimeName;
  logger?: RuntimeLogger;
  onEvent?: (e: ContainerEvent) => void;
  onLog?: (line: LogLine) => void;
  /** One timer checks exits, timeouts and logs of every container. @default 200 */
  pollIntervalMs?: number;
  /** @default 60000 */
  startTimeoutMs?: number;
  /** Per stream; see LogFollower. @default 16 MiB */
  maxLogSpoolBytes?: number;
  /** @default "/berth" */
  cgroupParent?: string;
  /**
   * Each container's disk quota: its writable layer lives on a sparse ext4
   * image of this size (agent/runtime/disk.ts); 0: no quota, the writable
   * layer is on the agent's disk. @default 50 GiB
   */
  diskBytes?: number;
  /**
   * Disks made and mounted ahead of demand, so a start does not wait for
   * mount(8) (agent/runtime/disks.ts); whoever sets it calls drainDisks()
   * when done. @default 0
   */
  diskPoolSize?: number;
}

export interface ResolvedContainerRuntimeOptions {
  root: string;
  runcRoot: string;
  runc: string;
  defaultRuntime: OciRuntimeName;
  /** Each runtime's binary. */
  bins: Record<OciRuntimeName, string>;
  /** Each runtime's state root (--root); runc's is runcRoot. */
  stateRoots: Record<OciRuntimeName, string>;
  logger?: RuntimeLogger;
  onEvent: (e: ContainerEvent) => void;
  onLog: (line: LogLine) => void;
  pollIntervalMs: number;
  startTimeoutMs: number;
  maxLogSpoolBytes: number;
  cgroupParent: string;
  diskBytes: number;
  diskPoolSize: number;
}

export function resolveContainerRuntimeOptions(o: ContainerRuntimeOptions): ResolvedContainerRuntimeOptions {
  if (!o.root) throw new BerthError("invalid_request", "ContainerRuntime needs a root directory");
  const root = resolve(o.root);
  const defaultRuntime = o.defaultRuntime ?? "runc";
  if (!isOciRuntimeName(defaultRuntime)) {
    throw new BerthError(
      "invalid_request",
      `the container runtime must be one of ${OCI_RUNTIMES.join(", ")}, got ${JSON.stringify(defaultRuntime)}`,
      { field: "runtime" },
    );
  }
  const runcRoot = resolve(o.runcRoot ?? join(root, ".runc"));
  const r: ResolvedContainerRuntimeOptions = {
    root,
    runcRoot,
    runc: o.runc ?? "runc",
    defaultRuntime,
    bins: { runc: o.runc ?? "runc", crun: o.crun ?? "crun", runsc: o.runsc ?? "runsc" },
    stateRoots: {
      runc: runcRoot,
      crun: defaultStateRoot(root, "crun"),
      runsc: defaultStateRoot(root, "runsc"),
    },
    logger: o.logger,
    onEvent: o.onEvent ?? (() => {}),
    onLog: o.onLog ?? (() => {}),
    pollIntervalMs: o.pollIntervalMs ?? 200,
    startTimeoutMs: o.startTimeoutMs ?? 60_000,
    maxLogSpoolBytes: o.maxLogSpoolBytes ?? 16 * 1024 * 1024,
    cgroupParent: o.cgroupParent ?? "/berth",
    diskBytes: o.diskBytes ?? DEFAULT_CONTAINER_DISK_BYTES,
    diskPoolSize: o.diskPoolSize ?? 0,
  };
  if (!Number.isInteger(r.diskPoolSize) || r.diskPoolSize < 0 || r.diskPoolSize > 64) {
    throw new BerthError("invalid_request", `diskPoolSize must be 0..64, got ${r.diskPoolSize}`);
  }
  if (!Number.isSafeInteger(r.diskBytes) || (r.diskBytes !== 0 && r.diskBytes < MIN_DISK_BYTES)) {
    throw new BerthError(
      "invalid_request",
      `the container disk size must be 0 (no quota) or at least ${MIN_DISK_BYTES / 2 ** 20} MiB, got ${r.diskBytes} bytes`,
    );
  }
  if (!(r.pollIntervalMs >= 10)) throw new BerthError("invalid_request", "pollIntervalMs must be >= 10");
  if (!(r.startTimeoutMs >= 1000)) throw new BerthError("invalid_request", "startTimeoutMs must be >= 1000");
  if (!/^\/[A-Za-z0-9_./-]*$/.test(r.cgroupParent)) {
    throw new BerthError("invalid_request", `cgroupParent ${r.cgroupParent} must be an absolute cgroup path`);
  }
  return r;
}
