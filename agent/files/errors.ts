// What a failed file system call means to the caller, naming the container
// path (never the host path, which would tell the sandbox where it lives).

import { BerthError } from "../../shared/errors.ts";
import { pathInvalid, pathNotFound } from "./resolve.ts";

const INVALID_WHY: Record<string, string> = {
  ENOTDIR: "a component of the path is not a directory",
  EISDIR: "is a directory",
  ENOTEMPTY: "the directory is not empty",
  ELOOP: "is a symbolic link (or changed into one while being opened)",
  EROFS: "is on a read-only file system",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EBUSY: "is in use (a mount point?)",
  EXDEV: "crosses a mount point",
  EINVAL: "invalid for this operation",
  ENAMETOOLONG: "the name is too long",
  ETXTBSY: "is a running executable",
};

/** Maps an errno from a file operation on `path` to a BerthError; other errors pass through. */
export function fileError(e: unknown, path: string): unknown {
  if (e instanceof BerthError) return e;
  const code = (e as NodeJS.ErrnoException).code;
  if (code === "ENOENT") return pathNotFound(path);
  if (code === "ENOSPC" || code === "EDQUOT") {
    return new BerthError("resource_exhausted", `${path}: no space left on the container's disk`, { path });
  }
  const why = code ? INVALID_WHY[code] : undefined;
  return why ? pathInvalid(path, why) : e;
}
