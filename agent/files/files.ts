// ContainerFilesApi over a container's root as its processes see it (for a
// running container, /proc/<pid>/root: its overlay, tmpfs and bind mounts).
// Every path goes through resolveInRoot, so symlinks stay inside that root;
// files are opened O_NOFOLLOW; writes land in a temp file beside the target
// and are renamed over it once complete. Bytes move in 64 KiB chunks.

import { randomBytes } from "node:crypto";
import { constants, lchownSync, lstatSync, mkdirSync, readdirSync } from "node:fs";
import { type FileHandle, open, rename, rm } from "node:fs/promises";
import { join, posix } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { ContainerFilesApi, FileInfo, FileSearchMatch, ReplaceResult } from "../../api/index.ts";
import { type IdMap, idInside } from "../runtime/index.ts";
import { fileError } from "./errors.ts";
import { fileInfo, readAccountNames } from "./info.ts";
import { normalizeContainerPath, pathInvalid, pathNotFound, resolveInRoot } from "./resolve.ts";
import { findInTree, replaceInTree } from "./search.ts";

export const FILE_CHUNK_BYTES = 64 * 1024;
const TEMP_PREFIX = ".berth-upload-";

/** Where a container's root is on this host. */
export interface ContainerRoots {
  /**
   * The host path of the container's root as its processes see it. Throws
   * not_found for an unknown container, failed_precondition for one whose
   * root is gone.
   */
  rootOf(containerId: string): Promise<string>;
  /**
   * The id range of a container in a user namespace (absent: ids are the
   * host's): what it shows is shifted back, what it makes is root's inside.
   */
  idMapOf?(containerId: string): IdMap | undefined;
  /**
   * The trees a container in a user namespace shares with others (its
   * volumes): where each is mounted inside and its directory on the host.
   */
  sharedTreesOf?(containerId: string): readonly { destination: string; source: string }[];
}

/** How a container's ids read on the host: through its id range, when it has one. */
export class IdShift {
  constructor(private readonly map: IdMap | undefined) {}

  /** The id the container sees for host id `id` (nobody, 65534, outside its range). */
  inside(id: number): number {
    return this.map ? (idInside(this.map, id) ?? NOBODY) : id;
  }

  /** Makes `hostPath` root's as the container sees it (a no-op without a range). */
  ownAsRoot(hostPath: string): void {
    if (this.map) lchownSync(hostPath, this.map.hostId, this.map.hostId);
  }
}

const NOBODY = 65_534;

/** Runs `fn`, mapping errno failures to path_not_found / path_invalid for `path`. */
async function onPath<T>(path: string, fn: () => Promise<T> | T): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw fileError(e, path);
  }
}

async function writeAll(fh: FileHandle, chunk: Uint8Array): Promise<void> {
  let off = 0;
  while (off < chunk.byteLength) {
    const { bytesWritten } = await fh.write(chunk, off, chunk.byteLength - off);
    off += bytesWritten;
  }
}

function checkMode(mode: unknown): number {
  if (typeof mode !== "number" || !Number.isInteger(mode) || mode < 0 || mode > 0o7777) {
    throw new BerthError("invalid_request", `mode must be an integer in 0..0o7777, got ${String(mode)}`);
  }
  return mode;
}

/**
 * mkdir -p of a container directory (symlinks followed inside the root);
 * returns its host path. `path` names the request in errors.
 */
function makeDirs(root: string, dir: string, path: string, shift: IdShift): string {
  const r = resolveInRoot(root, dir, { followFinal: true });
  if (r.stat) {
    if (!r.stat.isDirectory()) throw pathInvalid(path, `${dir} exists and is not a directory`);
    return r.hostPath;
  }
  const parts = r.containerPath.split("/").filter((p) => p !== "");
  const firstMissing = (r.missingFrom ?? r.containerPath).split("/").filter((p) => p !== "").length - 1;
  for (let i = Math.max(firstMissing, 0); i < parts.length; i++) {
    const host = join(root, ...parts.slice(0, i + 1));
    try {
      mkdirSync(host, { mode: 0o755 });
      shift.ownAsRoot(host);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST" || !lstatSync(host).isDirectory()) throw e;
    }
  }
  return r.hostPath;
}

export class ContainerFiles implements ContainerFilesApi {
  constructor(private readonly roots: ContainerRoots) {}

  /**
   * Where `path` of the container is on the host: inside one of its shared
   * trees (a volume, seen through its id mapping), that tree's own directory
   * with the host's ids (the agent, as root, could not write through the
   * mapping); otherwise its root, with its ids. `accounts` is where its
   * user and group names are read.
   */
  private async place(
    containerId: string,
    path: string,
  ): Promise<{ root: string; at: string; shift: IdShift; accounts: string }> {
    const accounts = await this.roots.rootOf(containerId);
    const p = normalizeContainerPath(path);
    for (const t of this.roots.sharedTreesOf?.(containerId) ?? []) {
      const rel = posix.relative(t.destination, p);
      if (rel.startsWith("..") || posix.isAbsolute(rel)) continue;
      return { root: t.source, at: `/${rel}`, shift: new IdShift(undefined), accounts };
    }
    return { root: accounts, at: path, shift: new IdShift(this.roots.idMapOf?.(containerId)), accounts };
  }

  async statPath(containerId: string, path: string): Promise<FileInfo> {
    const { root, at, shift, accounts } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    return onPath(p, () => {
      const r = resolveInRoot(root, at, { followFinal: false });
      if (!r.stat) throw pathNotFound(p);
      return fileInfo(p, r.stat, readAccountNames(accounts), shift);
    });
  }

  async listDir(containerId: string, path: string): Promise<FileInfo[]> {
    const { root, at, shift, accounts } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    return onPath(p, () => {
      const r = resolveInRoot(root, at, { followFinal: true });
      if (!r.stat) throw pathNotFound(p);
      if (!r.stat.isDirectory()) throw pathInvalid(p, "is not a directory");
      const names = readAccountNames(accounts);
      const out: FileInfo[] = [];
      for (const name of readdirSync(r.hostPath).sort()) {
        let st: ReturnType<typeof lstatSync>;
        try {
          st = lstatSync(join(r.hostPath, name));
        } catch {
          continue; // removed since readdir
        }
        out.push(fileInfo(posix.join(p, name), st, names, shift));
      }
      return out;
    });
  }

  async *readFile(
    containerId: string,
    path: string,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<Uint8Array> {
    const { root, at } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    const fh = await onPath(p, async () => {
      const r = resolveInRoot(root, at, { followFinal: true });
      if (!r.stat) throw pathNotFound(p);
      if (r.stat.isDirectory()) throw pathInvalid(p, "is a directory, not a file");
      if (!r.stat.isFile()) throw pathInvalid(p, "is not a regular file");
      // O_NONBLOCK: a FIFO swapped in meanwhile must not hang the open.
      const h = await open(r.hostPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      if (!(await h.stat()).isFile()) {
        await h.close();
        throw pathInvalid(p, "is not a regular file");
      }
      return h;
    });
    try {
      for (;;) {
        if (opts.signal?.aborted) return;
        const buf = Buffer.allocUnsafe(FILE_CHUNK_BYTES);
        const { bytesRead } = await onPath(p, () => fh.read(buf, 0, buf.length, null));
        if (bytesRead === 0) return;
        yield buf.subarray(0, bytesRead);
      }
    } finally {
      await fh.close();
    }
  }

  async writeFile(
    containerId: string,
    path: string,
    data: AsyncIterable<Uint8Array>,
    opts: { mode?: number } = {},
  ): Promise<FileInfo> {
    const mode = checkMode(opts.mode ?? 0o644);
    const { root, at, shift, accounts } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    if (p === "/") throw pathInvalid(p, "is the root directory, not a file");
    const r = await onPath(p, () => resolveInRoot(root, at, { followFinal: true }));
    if (r.stat?.isDirectory()) throw pathInvalid(p, "is a directory, not a file");
    if (r.stat && !r.stat.isFile()) throw pathInvalid(p, "exists and is not a regular file");
    const dir = await onPath(p, () => makeDirs(root, posix.dirname(r.containerPath), p, shift));
    const tmp = join(dir, `${TEMP_PREFIX}${randomBytes(6).toString("hex")}`);
    const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
    const fh = await onPath(p, () => open(tmp, flags, 0o600));
    try {
      for await (const chunk of data) await writeAll(fh, chunk);
      await fh.chmod(mode);
      shift.ownAsRoot(tmp);
      await fh.close();
      await rename(tmp, r.hostPath);
    } catch (e) {
      await fh.close().catch(() => {});
      await rm(tmp, { force: true });
      throw fileError(e, p);
    }
    return onPath(p, () => fileInfo(p, lstatSync(r.hostPath), readAccountNames(accounts), shift));
  }

  async deleteFile(containerId: string, path: string): Promise<void> {
    const { root, at } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    await onPath(p, async () => {
      const r = resolveInRoot(root, at, { followFinal: false });
      if (!r.stat) throw pathNotFound(p);
      if (r.stat.isDirectory()) throw pathInvalid(p, "is a directory; delete it with deleteDirectory");
      await rm(r.hostPath);
    });
  }

  async createDirectory(containerId: string, path: string): Promise<FileInfo> {
    const { root, at, shift, accounts } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    return onPath(p, () => {
      const host = makeDirs(root, at, p, shift);
      return fileInfo(p, lstatSync(host), readAccountNames(accounts), shift);
    });
  }

  async deleteDirectory(containerId: string, path: string): Promise<void> {
    const { root, at } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    if (p === "/") throw pathInvalid(p, "the root directory cannot be deleted");
    await onPath(p, async () => {
      const r = resolveInRoot(root, at, { followFinal: false });
      if (!r.stat) throw pathNotFound(p);
      if (!r.stat.isDirectory()) throw pathInvalid(p, "is not a directory");
      if (r.containerPath === "/") throw pathInvalid(p, "the root directory cannot be deleted");
      // fs.rm never follows symlinks below the directory: it unlinks them.
      await rm(r.hostPath, { recursive: true });
    });
  }

  async findInFiles(containerId: string, path: string, pattern: string): Promise<FileSearchMatch[]> {
    if (typeof pattern !== "string" || pattern === "") {
      throw new BerthError("invalid_request", "find needs a non-empty pattern");
    }
    let re: RegExp;
    try {
      re = new RegExp(pattern, "g");
    } catch (e) {
      throw new BerthError(
        "invalid_request",
        `pattern ${pattern} is not a valid regular expression: ${(e as Error).message}`,
        {
          pattern,
        },
      );
    }
    const { root, at } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    return onPath(p, () => findInTree(root, at, p, re));
  }

  async replaceInFiles(
    containerId: string,
    path: string,
    oldString: string,
    newString: string,
  ): Promise<ReplaceResult[]> {
    if (typeof oldString !== "string" || oldString === "") {
      throw new BerthError("invalid_request", "replace needs a non-empty old_string");
    }
    if (typeof newString !== "string") throw new BerthError("invalid_request", "replace needs a new_string");
    const { root, at } = await this.place(containerId, path);
    const p = normalizeContainerPath(path);
    return onPath(p, () => replaceInTree(root, at, p, oldString, newString));
  }
}
