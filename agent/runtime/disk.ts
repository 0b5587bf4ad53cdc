import { execFile } from "node:child_process";
import {
  closeSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readSync,
  rmSync,
  statSync,
  statfsSync,
  writeSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { mountsUnder } from "./rootfs.ts";

// A container's disk quota: its overlay's upper and work dirs live on a
// filesystem of its own, an ext4 image in the bundle dir (<bundle>/disk/
// disk.img) loop-mounted at <bundle>/disk/mnt. The image is sparse (truncate), so a 50 GiB quota costs the
// host only what the container writes (plus ~0.5 MiB of ext4 metadata); a
// container that writes past it gets ENOSPC instead of filling the agent's
// disk. The host's filesystem (ext4 without project quotas here, anything on
// other hosts) needs no quota support. mount -o loop attaches the loop device
// with autoclear, so the unmount detaches it and removing the bundle dir
// deletes the image: nothing else to track across agent restarts. mkfs runs
// once per runtime (DiskTemplate); each disk is a copy of its few written
// blocks. Which disks exist, and the ones made ahead of demand: disks.ts.

const execFileP = promisify(execFile);

export interface DiskPaths {
  /** Holds the image and its mount point: one directory, so a made disk moves with one rename. */
  dir: string;
  /** The sparse ext4 image. */
  image: string;
  /** Where the image is mounted; the overlay's upper and work dirs lie under it. */
  mountPoint: string;
}

export function diskPaths(dir: string): DiskPaths {
  return { dir, image: join(dir, "disk.img"), mountPoint: join(dir, "mnt") };
}

/** A container's disk: <bundle>/disk/{disk.img,mnt/}. */
export function diskPathsFor(bundleDir: string): DiskPaths {
  return diskPaths(join(bundleDir, "disk"));
}

/** Sparse: what a container does not write costs nothing. */
export const DEFAULT_CONTAINER_DISK_BYTES = 50 * 2 ** 30;

/** The smallest quota ext4 formats well (its metadata alone takes a few MiB). */
export const MIN_DISK_BYTES = 16 * 2 ** 20;

const run = async (what: string, cmd: string, args: string[]): Promise<void> => {
  try {
    await execFileP(cmd, args);
  } catch (e) {
    const err = e as { stderr?: string; message: string; code?: string };
    const why =
      err.code === "ENOENT"
        ? `${cmd} is not installed (Debian package e2fsprogs)`
        : err.stderr || err.message;
    throw new Error(`${what} failed: ${why.trim()}`);
  }
};

/** mkfs.ext4's arguments for an image of the container disk. */
const MKFS_ARGS = [
  "-q",
  "-F",
  "-E",
  "lazy_itable_init=1,nodiscard",
  // No journal (the upper dir dies with the container: nothing to replay),
  // no reserved GDT blocks for online resizing, no reserved blocks (the
  // quota is the container's to use): ~0.5 MiB of metadata written for 50 GiB.
  "-O",
  "^has_journal,^resize_inode",
  "-m",
  "0",
];

/** A sparse file of `bytes` (ftruncate, not write: it stays sparse). */
function sparseFile(path: string, bytes: number): number {
  const fd = openSync(path, "wx");
  try {
    ftruncateSync(fd, bytes);
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  return fd;
}

/**
 * The blocks mkfs.ext4 writes for an image of one size, kept in memory:
 * every container disk of that size is these bytes at these offsets in a
 * sparse file, written in-process instead of running mkfs (tens of ms, the
 * larger part of a container start) per container. ext4 does not mind the
 * copies sharing a UUID.
 */
export interface DiskTemplate {
  bytes: number;
  extents: { offset: number; data: Buffer }[];
}

/**
 * Formats one image of `bytes` at `scratch`, reads its written extents
 * (filefrag -e) and deletes it. Undefined where the host's filesystem
 * cannot list extents: each disk is then formatted on its own.
 */
export async function makeDiskTemplate(scratch: string, bytes: number): Promise<DiskTemplate | undefined> {
  closeSync(sparseFile(scratch, bytes));
  try {
    await run(`formatting the container disk template ${scratch}`, "mkfs.ext4", [...MKFS_ARGS, scratch]);
    const { stdout } = await execFileP("filefrag", ["-e", scratch]);
    const blockSize = Number(/blocks of (\d+) bytes/.exec(stdout)?.[1]);
    if (!(blockSize > 0)) return undefined;
    const extents: DiskTemplate["extents"] = [];
    const fd = openSync(scratch, "r");
    try {
      for (const m of stdout.matchAll(/^\s*\d+:\s+(\d+)\.\.\s*(\d+):/gm)) {
        const offset = Number(m[1]) * blockSize;
        const data = Buffer.alloc((Number(m[2]) - Number(m[1]) + 1) * blockSize);
        readSync(fd, data, 0, data.length, offset);
        extents.push({ offset, data });
      }
    } finally {
      closeSync(fd);
    }
    return extents.length > 0 ? { bytes, extents } : undefined;
  } catch {
    return undefined;
  } finally {
    rmSync(scratch, { force: true });
  }
}

/**
 * Creates the sparse image of `bytes` (from `template` when there is one of
 * that size, else with mkfs.ext4) and mounts it; the caller removes the
 * bundle dir on failure.
 */
export async function createDisk(p: DiskPaths, bytes: number, template?: DiskTemplate): Promise<void> {
  mkdirSync(p.dir, { recursive: true });
  const fd = sparseFile(p.image, bytes);
  try {
    if (template?.bytes === bytes) {
      for (const e of template.extents) writeSync(fd, e.data, 0, e.data.length, e.offset);
    }
  } finally {
    closeSync(fd);
  }
  if (template?.bytes !== bytes) {
    await run(`formatting the container disk ${p.image}`, "mkfs.ext4", [...MKFS_ARGS, p.image]);
  }
  mkdirSync(p.mountPoint, { recursive: true });
  // noinit_itable: no background thread zeroing the inode tables, which
  // would write hundreds of MiB per container to the host's disk.
  try {
    const args = ["-t", "ext4", "-o", "loop,noinit_itable", p.image, p.mountPoint];
    await run(`mounting the container disk ${p.image}`, "mount", args);
  } catch (e) {
    throw new Error(
      `${(e as Error).message}; on a host without loop devices, run the agent with --container-disk 0 (no disk quotas)`,
    );
  }
}

/** Unmounts the disk (detaching its loop device); a no-op when it is not mounted. */
export async function unmountDisk(p: DiskPaths): Promise<void> {
  for (const point of mountsUnder(p.mountPoint)) {
    try {
      await execFileP("umount", [point]);
    } catch {
      // Still busy: detach now; the kernel releases the loop device when the last user goes.
      await run(`unmounting ${point}`, "umount", ["-l", point]);
    }
  }
}

export interface DiskUsage {
  sizeBytes: number;
  freeBytes: number;
  freeInodes: number;
  /** Out of space or of inodes, within a margin (a write that failed leaves a few blocks free). */
  full: boolean;
}

/** How full the container's disk is; undefined when it has none (no quota) or it is not mounted. */
export function readDiskUsage(p: DiskPaths): DiskUsage | undefined {
  if (!isMounted(p)) return undefined;
  const s = statfsSync(p.mountPoint);
  const usable = s.blocks * s.bsize;
  const freeBytes = s.bavail * s.bsize;
  return {
    // The quota as configured (the image's size); ext4's metadata makes what statfs reports a little less.
    sizeBytes: statSync(p.image).size,
    freeBytes,
    freeInodes: s.ffree,
    full: isFull(usable, freeBytes, s.ffree, s.files),
  };
}

/** A mount point sits on another device than its parent (cheaper than reading mountinfo). */
export function isMounted(p: DiskPaths): boolean {
  try {
    return statSync(p.mountPoint).dev !== statSync(dirname(p.mountPoint)).dev;
  } catch {
    return false;
  }
}

/**
 * "(Almost) no free space": less than 1% of the disk free, counted as at
 * least 4 MiB (a write that hit ENOSPC leaves up to its last chunk free) and
 * at most 64 MiB; or less than 1% of the inodes (at most 1024) free.
 */
export function isFull(sizeBytes: number, freeBytes: number, freeInodes: number, inodes: number): boolean {
  const margin = Math.min(Math.max(sizeBytes / 100, 4 * 2 ** 20), 64 * 2 ** 20);
  return freeBytes < margin || freeInodes < Math.min(inodes / 100, 1024);
}
