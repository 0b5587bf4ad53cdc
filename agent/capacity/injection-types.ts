// What giving GPUs to a container adds to its OCI runtime config. The
// container runtime merges it into config.json: env into process.env, mounts
// into mounts, devices into linux.devices, deviceCgroupRules into
// linux.resources.devices, hooks into hooks.

import { type BigIntStats, statSync } from "node:fs";
import { join, relative } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { OciHookPhase } from "../runtime/oci-types.ts";

export interface GpuMount {
  source: string;
  destination: string;
  type: "bind";
  options: string[];
}

export interface GpuDeviceNode {
  /** Path inside the container, e.g. /dev/nvidia0. */
  path: string;
  type: "c";
  major: number;
  minor: number;
  /** Permission bits for the node runc creates, e.g. 0o666. */
  fileMode: number;
  uid: number;
  gid: number;
}

export interface GpuCgroupRule {
  allow: true;
  type: "c";
  major: number;
  minor: number;
  access: "rwm";
}

/** An OCI hook (config.json hooks.<phase>[]), as a CDI spec asks for it. */
export interface GpuHook {
  path: string;
  args?: string[];
  env?: string[];
  timeout?: number;
}

/** The OCI hook phases a GPU injection may ask hooks for (the runtime writes them to config.json). */
export type GpuHookPhase = OciHookPhase;

export interface GpuInjection {
  env: Record<string, string>;
  mounts: GpuMount[];
  devices: GpuDeviceNode[];
  deviceCgroupRules: GpuCgroupRule[];
  /**
   * OCI hooks by phase, written to the container's config.json: CDI specs from nvidia-ctk use
   * createContainer hooks to make the libcuda.so symlinks and update the container's ld.so.cache;
   * the agent strategy brings its own ld cache hook (ldcache-hook.ts).
   */
  hooks: Partial<Record<GpuHookPhase, GpuHook[]>>;
}

export const CONTAINER_DEV = "/dev";

/**
 * Where a container-side /dev path lives on the host when the device
 * directory is not /dev (tests, or a driver container's dev root).
 */
export function hostDevicePath(path: string, devDir: string): string {
  if (path === CONTAINER_DEV || path.startsWith(`${CONTAINER_DEV}/`)) {
    return join(devDir, relative(CONTAINER_DEV, path));
  }
  return path;
}

/** Reads a character device node's numbers from the host; a missing or non-char node is an error. */
export function readCharDevice(hostPath: string, containerPath: string): GpuDeviceNode {
  let st: BigIntStats;
  try {
    st = statSync(hostPath, { bigint: true });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "error";
    throw new BerthError("failed_precondition", `GPU device node ${hostPath} cannot be read (${code})`, {
      path: hostPath,
    });
  }
  if (!st.isCharacterDevice()) {
    throw new BerthError("failed_precondition", `GPU device node ${hostPath} is not a character device`, {
      path: hostPath,
    });
  }
  const { major, minor } = splitDev(st.rdev);
  return {
    path: containerPath,
    type: "c",
    major,
    minor,
    fileMode: Number(st.mode & 0o777n),
    uid: Number(st.uid),
    gid: Number(st.gid),
  };
}

/** glibc's major()/minor() for Linux's 64-bit dev_t. */
export function splitDev(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & 0xfffff000n);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & 0xffffff00n);
  return { major: Number(major), minor: Number(minor) };
}

export function cgroupRuleFor(node: GpuDeviceNode): GpuCgroupRule {
  return { allow: true, type: "c", major: node.major, minor: node.minor, access: "rwm" };
}
