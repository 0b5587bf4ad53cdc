// The capability device nodes a MIG slice needs, worked out as the NVIDIA
// container toolkit does (libnvidia-container's nvcap.c, nvidia-ctk's
// nvcaps): the driver publishes, per GPU instance and per compute instance,
// a file under /proc/driver/nvidia/capabilities whose DeviceFileMinor names
// the /dev/nvidia-caps/nvidia-capN node that grants it; the major is the
// "nvidia-caps" character device in /proc/devices. A process that can open
// both nodes of a slice (and its parent's /dev/nvidiaN) can use the slice,
// and no other slice of that GPU.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import { CONTAINER_DEV, type GpuDeviceNode } from "./injection-types.ts";

/** Where the driver publishes its capabilities. */
export const NVIDIA_CAPS_PROC_DIR = "/proc/driver/nvidia/capabilities";

/** What one capability file says: its node's minor and the mode the driver creates it with. */
export interface CapAccess {
  minor: number;
  /** Permission bits (the file gives them in decimal: 292 is 0o444). */
  mode: number;
}

/**
 * Parses a capability file ("DeviceFileMinor: 21\nDeviceFileMode: 292\n
 * DeviceFileModify: 1"); `what` names it in errors.
 */
export function parseCapAccess(text: string, what: string): CapAccess {
  const minor = /^DeviceFileMinor:\s*(\d+)\s*$/m.exec(text)?.[1];
  const mode = /^DeviceFileMode:\s*(\d+)\s*$/m.exec(text)?.[1];
  if (minor === undefined) {
    throw new BerthError("failed_precondition", `${what} has no "DeviceFileMinor: N" line`, { path: what });
  }
  return { minor: Number(minor), mode: mode === undefined ? 0o444 : Number(mode) & 0o777 };
}

/** The major of a character device driver in /proc/devices ("Character devices:" section), or undefined. */
export function charDeviceMajor(procDevices: string, name: string): number | undefined {
  let inChar = false;
  for (const line of procDevices.split("\n")) {
    if (/^Character devices:/.test(line)) inChar = true;
    else if (/^Block devices:/.test(line)) inChar = false;
    else if (inChar) {
      const m = /^\s*(\d+)\s+(\S+)\s*$/.exec(line);
      if (m && m[2] === name) return Number(m[1]);
    }
  }
  return undefined;
}

/** The two capability files of a slice, relative to NVIDIA_CAPS_PROC_DIR: its GPU instance's and its compute instance's. */
export function migCapFiles(gpu: number, gi: number, ci: number): [string, string] {
  return [`gpu${gpu}/mig/gi${gi}/access`, `gpu${gpu}/mig/gi${gi}/ci${ci}/access`];
}

export interface MigCapFacts {
  /** The driver's capability directory. @default NVIDIA_CAPS_PROC_DIR */
  capsDir: string;
  /** The text of /proc/devices. */
  procDevices: string;
}

/**
 * The /dev/nvidia-caps nodes of one MIG slice (GPU instance first, then
 * compute instance), as the toolkit would give them. The parent GPU is the
 * device's `index`, which berth also takes as its /dev/nvidiaN minor.
 */
export function migCapNodes(device: GpuDevice, facts: MigCapFacts): GpuDeviceNode[] {
  const mig = device.mig;
  if (!mig) throw new BerthError("invalid_request", `GPU ${device.uuid} is not a MIG instance`);
  if (mig.gi === undefined || mig.ci === undefined) {
    throw new BerthError(
      "failed_precondition",
      `MIG instance ${device.uuid} has no GPU/compute instance ids (the MIG table of plain nvidia-smi could not be read); install the NVIDIA container toolkit (nvidia-ctk) to give it through CDI`,
      { uuid: device.uuid },
    );
  }
  const major = charDeviceMajor(facts.procDevices, "nvidia-caps");
  if (major === undefined) {
    throw new BerthError(
      "failed_precondition",
      `no "nvidia-caps" character device in /proc/devices: the NVIDIA driver does not publish MIG capabilities on this host`,
    );
  }
  return migCapFiles(device.index, mig.gi, mig.ci).map((rel) => {
    const file = join(facts.capsDir, rel);
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? "error";
      throw new BerthError(
        "failed_precondition",
        `MIG instance ${device.uuid}: ${file} cannot be read (${code}); was the slice destroyed?`,
        { uuid: device.uuid, path: file },
      );
    }
    const cap = parseCapAccess(text, file);
    return {
      path: `${CONTAINER_DEV}/nvidia-caps/nvidia-cap${cap.minor}`,
      type: "c",
      major,
      minor: cap.minor,
      fileMode: cap.mode,
      uid: 0,
      gid: 0,
    };
  });
}
