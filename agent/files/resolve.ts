// Resolves a container path to a host path under the container's root the
// way the container would, without ever letting the kernel follow a symlink:
// each component is lstat'ed; a symlink's target is re-resolved against the
// container root (absolute targets from the root, ".." clamped at it), as Go's
// filepath-securejoin does. What is left is a path of real directories that
// the caller opens with O_NOFOLLOW.
//
// Residual risk (shared with securejoin, which Node cannot improve on without
// openat2): a process in the container may swap a resolved directory for a
// symlink between resolution and open.

import { lstatSync, readlinkSync, type Stats, statSync } from "node:fs";
import { join, posix } from "node:path";
import { BerthError } from "../../shared/errors.ts";

/** Symlinks followed in one resolution, as Linux's own limit (ELOOP). */
export const MAX_SYMLINK_HOPS = 40;
const MAX_PATH_CHARS = 4096;

export const pathNotFound = (path: string, why = "no such file or directory") =>
  new BerthError("path_not_found", `${path}: ${why} in the container`, { path });

export const pathInvalid = (path: string, why: string) =>
  new BerthError("path_invalid", `${path}: ${why}`, { path });

/**
 * The path as the caller names it, normalised lexically: absolute, no "."
 * or empty components, ".." clamped at "/". Relative paths are taken from "/".
 */
export function normalizeContainerPath(path: unknown): string {
  if (typeof path !== "string") throw pathInvalid(String(path), "a path must be a string");
  if (path.includes("\0")) throw pathInvalid(path.replace(/\0/g, "\\0"), "a path may not contain NUL");
  if (path.length > MAX_PATH_CHARS) throw pathInvalid(path.slice(0, 80), `longer than ${MAX_PATH_CHARS}`);
  return posix.normalize(`/${path}`).replace(/(.)\/$/, "$1");
}

export interface Resolved {
  /** The container path after following symlinks ("/" for the root). */
  containerPath: string;
  /** That path on the host, under the container root. */
  hostPath: string;
  /** lstat of hostPath; undefined when nothing is there. */
  stat: Stats | undefined;
  /** The first component that does not exist, as a container path (undefined when all do). */
  missingFrom?: string;
}

function lstatOrUndefined(p: string, requested: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "ENOTDIR") throw pathInvalid(requested, "a component of the path is not a directory");
    if (code === "EACCES" || code === "EPERM") throw pathInvalid(requested, "permission denied");
    throw e;
  }
}

/**
 * Resolves `path` (a container path) inside `root` (a host directory).
 * Symlinks in every component are followed inside the root; the last one
 * only when `followFinal`.
 */
export function resolveInRoot(root: string, path: string, opts: { followFinal: boolean }): Resolved {
  const requested = normalizeContainerPath(path);
  // The raw components, not the normalised path: ".." after a symlink is the
  // link target's parent, as the kernel has it, not the link's.
  const queue = path.split("/").filter((c) => c !== "");
  const resolved: string[] = [];
  let hops = 0;
  // Index in `resolved` of the first component that does not exist.
  let missingAt: number | undefined;
  // The root itself may be a magic link (/proc/<pid>/root): stat, not lstat.
  const rootStat = () => statSync(root);
  let stat: Stats | undefined = rootStat();
  while (queue.length > 0) {
    const c = queue.shift()!;
    if (c === ".") continue;
    if (c === "..") {
      resolved.pop();
      if (missingAt !== undefined && resolved.length <= missingAt) missingAt = undefined;
      if (missingAt === undefined) {
        stat = resolved.length === 0 ? rootStat() : lstatOrUndefined(join(root, ...resolved), requested);
      }
      continue;
    }
    if (missingAt === undefined && stat && !stat.isDirectory()) {
      throw pathInvalid(requested, `/${resolved.join("/")} is not a directory`);
    }
    const host = join(root, ...resolved, c);
    stat = missingAt === undefined ? lstatOrUndefined(host, requested) : undefined;
    if (!stat) {
      missingAt ??= resolved.length;
      resolved.push(c);
      continue;
    }
    if (stat.isSymbolicLink() && (queue.length > 0 || opts.followFinal)) {
      if (++hops > MAX_SYMLINK_HOPS) throw pathInvalid(requested, "too many levels of symbolic links");
      const target = readlinkSync(host);
      if (target.startsWith("/")) resolved.length = 0;
      queue.unshift(...target.split("/").filter((p) => p !== ""));
      stat = resolved.length === 0 ? rootStat() : lstatOrUndefined(join(root, ...resolved), requested);
      continue;
    }
    resolved.push(c);
  }
  const out: Resolved = {
    containerPath: `/${resolved.join("/")}`,
    hostPath: join(root, ...resolved),
    stat: missingAt === undefined ? stat : undefined,
  };
  if (missingAt !== undefined) out.missingFrom = `/${resolved.slice(0, missingAt + 1).join("/")}`;
  return out;
}
