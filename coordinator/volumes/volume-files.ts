// Volumes as the coordinator sees them (docs/volumes.md): the directories
// <volumeRoot>/<workspace id>/<name> that agents mount, read and written
// here for the REST routes and the CLI. The coordinator's volumeRoot is the
// same shared path the agents mount (local disk under `berth up`).
//
// Paths inside a volume are resolved without following any symlink: the
// files were written by containers, so a link could point anywhere on the
// coordinator's host. A path through or to a symlink is refused
// (path_invalid), ".." may not appear, and files are opened with O_NOFOLLOW.

import { constants, type Stats } from "node:fs";
import { lstat, mkdir, open, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { randomBytes } from "node:crypto";
import { BerthError } from "../../shared/errors.ts";
import { checkVolumeName, checkWorkspaceId, volumeDir } from "../../shared/volumes.ts";

export interface VolumeInfo {
  name: string;
  /** Bytes of the regular files in it (symlinks and special files count 0). */
  size_bytes: number;
  created_at: string;
}

export interface VolumeEntry {
  name: string;
  /** Relative to the volume's root, with a leading "/". */
  path: string;
  is_dir: boolean;
  size: number;
  mod_time: string;
}

const MAX_PATH_CHARS = 4096;
const TMP_PREFIX = ".berth-upload-";

const pathInvalid = (path: string, why: string) =>
  new BerthError("path_invalid", `${path}: ${why}`, { path });
const pathNotFound = (volume: string, path: string) =>
  new BerthError("path_not_found", `${path}: no such file or directory in volume ${volume}`, { path });
const volumeNotFound = (name: string) => new BerthError("not_found", `volume ${name} not found`);

/** The components of a path inside a volume: no "..", no NUL; "" and "." dropped. */
export function volumePathParts(path: unknown): string[] {
  if (typeof path !== "string") throw pathInvalid(String(path), "a path must be a string");
  if (path.includes("\0")) throw pathInvalid(path.replace(/\0/g, "\\0"), "a path may not contain NUL");
  if (path.length > MAX_PATH_CHARS) throw pathInvalid(path.slice(0, 80), `longer than ${MAX_PATH_CHARS}`);
  const parts = path.split("/").filter((c) => c !== "" && c !== ".");
  if (parts.includes("..")) throw pathInvalid(path, "'..' may not appear in a volume path");
  return parts;
}

async function lstatOrUndefined(p: string): Promise<Stats | undefined> {
  try {
    return await lstat(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

export class VolumeFiles {
  constructor(readonly root: string) {}

  private dir(workspaceId: string, name: string): string {
    return volumeDir(this.root, workspaceId, name);
  }

  private async mustExist(workspaceId: string, name: string): Promise<string> {
    const dir = this.dir(workspaceId, name);
    const st = await lstatOrUndefined(dir);
    if (!st?.isDirectory()) throw volumeNotFound(name);
    return dir;
  }

  /**
   * Walks `parts` under the volume directory, lstat'ing each component:
   * a symlink anywhere is refused, a missing one is path_not_found.
   */
  private async resolve(
    volume: string,
    dir: string,
    parts: string[],
  ): Promise<{ path: string; stat: Stats }> {
    let p = dir;
    // The volume may be deleted between mustExist and here (a concurrent DELETE).
    let st = await lstatOrUndefined(dir);
    if (!st) throw volumeNotFound(volume);
    for (const [i, c] of parts.entries()) {
      const shown = `/${parts.slice(0, i + 1).join("/")}`;
      if (!st.isDirectory()) throw pathInvalid(shown, "a component of the path is not a directory");
      p = join(p, c);
      const next = await lstatOrUndefined(p);
      if (!next) throw pathNotFound(volume, shown);
      if (next.isSymbolicLink())
        throw pathInvalid(shown, "is a symbolic link; volume files are served without following links");
      st = next;
    }
    return { path: p, stat: st };
  }

  async list(workspaceId: string): Promise<VolumeInfo[]> {
    const wsDir = join(this.root, checkWorkspaceId(workspaceId));
    let names: string[];
    try {
      names = await readdir(wsDir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw e;
    }
    const out: VolumeInfo[] = [];
    for (const name of names.sort()) {
      const st = await lstatOrUndefined(join(wsDir, name));
      if (!st?.isDirectory()) continue;
      out.push({
        name,
        size_bytes: await this.bytesUnder(join(wsDir, name)),
        created_at: st.birthtime.toISOString(),
      });
    }
    return out;
  }

  async get(workspaceId: string, name: string): Promise<VolumeInfo> {
    checkVolumeName(name);
    const dir = await this.mustExist(workspaceId, name);
    const st = await lstat(dir);
    return { name, size_bytes: await this.bytesUnder(dir), created_at: st.birthtime.toISOString() };
  }

  /** Bytes of every regular file of the workspace's volumes (the volume_bytes quota's usage). */
  async workspaceBytes(workspaceId: string): Promise<number> {
    return (await this.list(workspaceId)).reduce((n, v) => n + v.size_bytes, 0);
  }

  private async bytesUnder(dir: string): Promise<number> {
    let total = 0;
    let entries: import("node:fs").Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw e;
    }
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.isDirectory()) total += await this.bytesUnder(p);
      else if (e.isFile()) total += (await lstatOrUndefined(p))?.size ?? 0;
    }
    return total;
  }

  /** Makes the volume; conflict when it exists. */
  async create(workspaceId: string, name: string): Promise<VolumeInfo> {
    const dir = this.dir(workspaceId, name);
    await mkdir(join(this.root, checkWorkspaceId(workspaceId)), { recursive: true, mode: 0o755 });
    try {
      await mkdir(dir, { mode: 0o755 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST") {
        throw new BerthError("conflict", `volume ${name} already exists`, { name });
      }
      throw e;
    }
    return this.get(workspaceId, name);
  }

  /** Removes the volume and every file in it. */
  async remove(workspaceId: string, name: string): Promise<void> {
    checkVolumeName(name);
    const dir = await this.mustExist(workspaceId, name);
    await rm(dir, { recursive: true, force: true });
  }

  /** The entries of a directory in the volume (or the one entry of a file). */
  async ls(workspaceId: string, name: string, path: string): Promise<VolumeEntry[]> {
    checkVolumeName(name);
    const parts = volumePathParts(path);
    const dir = await this.mustExist(workspaceId, name);
    const target = await this.resolve(name, dir, parts);
    const base = `/${parts.join("/")}`;
    const entry = (n: string, p: string, st: Stats): VolumeEntry => ({
      name: n,
      path: p,
      is_dir: st.isDirectory(),
      size: st.isFile() ? st.size : 0,
      mod_time: st.mtime.toISOString(),
    });
    if (!target.stat.isDirectory()) return [entry(parts.at(-1) ?? "", base, target.stat)];
    const out: VolumeEntry[] = [];
    for (const n of (await readdir(target.path)).sort()) {
      if (n.startsWith(TMP_PREFIX)) continue;
      const st = await lstatOrUndefined(join(target.path, n));
      if (st) out.push(entry(n, base === "/" ? `/${n}` : `${base}/${n}`, st));
    }
    return out;
  }

  /** A regular file's size and a stream of its bytes (opened without following links). */
  async read(workspaceId: string, name: string, path: string): Promise<{ size: number; stream: Readable }> {
    checkVolumeName(name);
    const parts = volumePathParts(path);
    if (parts.length === 0) throw pathInvalid("/", "is the volume's root directory, not a file");
    const dir = await this.mustExist(workspaceId, name);
    const target = await this.resolve(name, dir, parts);
    if (!target.stat.isFile()) throw pathInvalid(`/${parts.join("/")}`, "is not a regular file");
    const shown = `/${parts.join("/")}`;
    // The file may be deleted, or replaced by a link, between resolve and open (a concurrent
    // DELETE or upload): answered as if it had happened first, not as an internal error.
    const fh = await open(target.path, constants.O_RDONLY | constants.O_NOFOLLOW).catch(
      (e: NodeJS.ErrnoException) => {
        if (e.code === "ENOENT") throw pathNotFound(name, shown);
        if (e.code === "ELOOP")
          throw pathInvalid(shown, "is a symbolic link; volume files are served without following links");
        throw e;
      },
    );
    const st = await fh.stat();
    return { size: st.size, stream: fh.createReadStream() };
  }

  /**
   * Writes a file from a stream: parent directories made as needed, the
   * bytes to a temp file beside it, renamed into place when complete, so a
   * reader (in a container too) sees the old file or the whole new one.
   * The volume is created on first use. `maxBytes` stops the upload past it.
   */
  async write(
    workspaceId: string,
    name: string,
    path: string,
    body: Readable,
    maxBytes = Number.POSITIVE_INFINITY,
  ): Promise<VolumeEntry> {
    checkVolumeName(name);
    const parts = volumePathParts(path);
    if (parts.length === 0) throw pathInvalid("/", "name a file to write, not the volume's root");
    const dir = this.dir(workspaceId, name);
    await mkdir(dir, { recursive: true, mode: 0o755 });
    let parent = dir;
    for (const [i, c] of parts.slice(0, -1).entries()) {
      parent = join(parent, c);
      const st = await lstatOrUndefined(parent);
      const shown = `/${parts.slice(0, i + 1).join("/")}`;
      if (st?.isSymbolicLink()) throw pathInvalid(shown, "is a symbolic link; uploads never follow links");
      if (st && !st.isDirectory()) throw pathInvalid(shown, "a component of the path is not a directory");
      if (!st) await mkdir(parent, { mode: 0o755 });
    }
    const final = join(parent, parts.at(-1)!);
    const existing = await lstatOrUndefined(final);
    if (existing && !existing.isFile())
      throw pathInvalid(`/${parts.join("/")}`, "exists and is not a regular file");
    const tmp = join(parent, `${TMP_PREFIX}${randomBytes(6).toString("hex")}`);
    let written = 0;
    try {
      await pipeline(
        body,
        async function* (src: AsyncIterable<Buffer>) {
          for await (const chunk of src) {
            written += chunk.length;
            if (written > maxBytes) {
              throw new BerthError(
                "limit_exceeded",
                `the upload passes the workspace's volume space (its limit max_volume_mb leaves ${maxBytes} bytes)`,
                { limit: "max_volume_mb" },
              );
            }
            yield chunk;
          }
        },
        (
          await open(
            tmp,
            constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
            0o644,
          )
        ).createWriteStream(),
      );
      await rename(tmp, final);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
    const st = await lstat(final);
    return {
      name: parts.at(-1)!,
      path: `/${parts.join("/")}`,
      is_dir: false,
      size: st.size,
      mod_time: st.mtime.toISOString(),
    };
  }
}
