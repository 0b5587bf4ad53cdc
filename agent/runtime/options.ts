import { join, resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import { DEFAULT_CONTAINER_DISK_BYTES, MIN_DISK_BYTES } from "./disk.ts";
import type { ContainerEvent, LogLine, RuntimeLogger } from "./types.ts";

export interface ContainerRuntimeOptions {
  /** <agentDataDir>/containers: one bundle dir per container. */
  root: string;
  /** runc --root. @default <root>/.runc */
  runcRoot?: string;
  /** @default "runc" */
  runc?: string;
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
  const r: ResolvedContainerRuntimeOptions = {
    root,
    runcRoot: resolve(o.runcRoot ?? join(root, ".runc")),
    runc: o.runc ?? "runc",
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
