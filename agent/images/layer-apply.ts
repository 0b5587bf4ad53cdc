// The rootfs of "parent + one layer" without unpacking the whole image again:
// the parent's unpacked rootfs is copied as hard links (`cp -al`, new
// directories, shared file inodes: a fraction of a second for a Debian
// rootfs, where `umoci raw unpack` of every layer takes seconds), the layer's
// OCI whiteouts are applied, and the layer is extracted on top with GNU tar.
// Sharing inodes is safe because rootfs dirs are read-only by contract and
// tar replaces a file by unlinking it and creating a new one (never writing
// through an existing inode; the test checks the parent is unchanged).
//
// GNU tar follows symlinks already on disk, so a layer whose paths go through
// a symlink of the parent (where umoci's securejoin would resolve it inside
// the root) is not applied here: `unpackLayerOnParent` throws
// LayerNotApplicable before touching anything and the caller unpacks the
// whole image. Layers committed from a container's overlay upper dir never
// take that path (the upper dir holds real directories only).

import { lstatSync, readdirSync } from "node:fs";
import { open, rm } from "node:fs/promises";
import { join } from "node:path";
import type { CommandRunner } from "./commands.ts";
import { LAYER_TAR_MEDIA_TYPE } from "./commit.ts";
import type { OciLayout, OciManifest } from "./oci-layout.ts";
import type { ResolvedImageStoreOptions } from "./options.ts";

/** The layer needs the full unpack (see the file comment); nothing was written. */
export class LayerNotApplicable extends Error {
  override name = "LayerNotApplicable";
}

export interface TarEntry {
  /** Normalised: no leading "./" or "/", no trailing "/". */
  name: string;
  /** The ustar type flag ("0" file, "1" hard link, "2" symlink, "5" directory, ...). */
  type: string;
  linkname: string;
  /** Bytes of the entry's data (a regular file's size). */
  size: number;
}

const BLOCK = 512;

function cString(buf: Buffer, start: number, len: number): string {
  const end = buf.indexOf(0, start);
  return buf.toString("utf8", start, end >= 0 && end < start + len ? end : start + len);
}

function numeric(buf: Buffer, start: number, len: number): number {
  // Base-256 (GNU) for sizes past 8 GiB: high bit of the first byte set.
  if ((buf[start]! & 0x80) !== 0) {
    let n = buf[start]! & 0x7f;
    for (let i = start + 1; i < start + len; i++) n = n * 256 + buf[i]!;
    return n;
  }
  const s = cString(buf, start, len).trim();
  return s === "" ? 0 : Number.parseInt(s, 8);
}

function paxRecords(data: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(0x20, i);
    if (sp < 0) break;
    const len = Number.parseInt(data.toString("utf8", i, sp), 10);
    if (!(len > 0)) break;
    const rec = data.toString("utf8", sp + 1, i + len - 1);
    const eq = rec.indexOf("=");
    if (eq > 0) out.set(rec.slice(0, eq), rec.slice(eq + 1));
    i += len;
  }
  return out;
}

function normalise(name: string): string {
  let n = name;
  while (n.startsWith("./")) n = n.slice(2);
  n = n.replace(/^\/+/, "").replace(/\/+$/, "");
  return n === "." ? "" : n;
}

/** The entries of an uncompressed tar file, read header by header (data is skipped, not read). */
export async function readTarEntries(path: string): Promise<TarEntry[]> {
  const fh = await open(path, "r");
  try {
    const entries: TarEntry[] = [];
    const header = Buffer.alloc(BLOCK);
    let pos = 0;
    let longName: string | undefined;
    let longLink: string | undefined;
    let pax = new Map<string, string>();
    for (;;) {
      const { bytesRead } = await fh.read(header, 0, BLOCK, pos);
      if (bytesRead < BLOCK || header.every((b) => b === 0)) break;
      const type = String.fromCharCode(header[156] || 0x30);
      const size = numeric(header, 124, 12);
      const dataAt = pos + BLOCK;
      pos = dataAt + Math.ceil(size / BLOCK) * BLOCK;
      if (type === "L" || type === "K" || type === "x") {
        const data = Buffer.alloc(size);
        await fh.read(data, 0, size, dataAt);
        if (type === "x") pax = paxRecords(data);
        else if (type === "L") longName = cString(data, 0, size);
        else longLink = cString(data, 0, size);
        continue;
      }
      if (type === "g") continue;
      const prefix = header.toString("latin1", 257, 262) === "ustar" ? cString(header, 345, 155) : "";
      const short = cString(header, 0, 100);
      const name = pax.get("path") ?? longName ?? (prefix ? `${prefix}/${short}` : short);
      const linkname = pax.get("linkpath") ?? longLink ?? cString(header, 157, 100);
      entries.push({ name: normalise(name), type, linkname, size: Number(pax.get("size") ?? size) });
      longName = undefined;
      longLink = undefined;
      pax = new Map();
    }
    return entries;
  } finally {
    await fh.close();
  }
}

const WHITEOUT = ".wh.";
const OPAQUE = ".wh..wh..opq";

function parts(path: string): string[] {
  const p = path.split("/").filter((s) => s !== "" && s !== ".");
  if (p.includes("..")) throw new LayerNotApplicable(`layer path ${JSON.stringify(path)} leaves the root`);
  return p;
}

/**
 * Throws LayerNotApplicable when a path's ancestors in `root` are anything
 * but real directories (or missing), unless the layer made them directories
 * before this entry (tar then replaces a symlink with the directory).
 */
function checkAncestors(root: string, path: string, layerDirs: Set<string>): void {
  const p = parts(path);
  for (let i = 1; i < p.length; i++) {
    const ancestor = p.slice(0, i).join("/");
    if (layerDirs.has(ancestor)) continue;
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(join(root, ancestor));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
      throw e;
    }
    if (!st.isDirectory()) {
      throw new LayerNotApplicable(`layer path ${JSON.stringify(path)} goes through a non-directory`);
    }
  }
}

/** What applying `entries` on `parentRootfs` deletes; throws LayerNotApplicable as above. */
export function planLayer(parentRootfs: string, entries: TarEntry[]): { remove: string[]; empty: string[] } {
  const layerDirs = new Set<string>();
  const remove: string[] = [];
  const empty: string[] = [];
  for (const e of entries) {
    if (e.name === "") continue;
    checkAncestors(parentRootfs, e.name, layerDirs);
    const p = parts(e.name);
    const base = p.at(-1)!;
    const dir = p.slice(0, -1).join("/");
    if (base === OPAQUE) empty.push(dir);
    else if (base.startsWith(WHITEOUT)) {
      const hidden = base.slice(WHITEOUT.length);
      remove.push(dir ? `${dir}/${hidden}` : hidden);
    } else if (e.type === "5") layerDirs.add(e.name);
    if (e.type === "1") checkAncestors(parentRootfs, normalise(e.linkname), layerDirs);
  }
  return { remove, empty };
}

/**
 * Makes `dest` (which must not exist) the rootfs of `parentRootfs` plus the
 * uncompressed OCI layer at `layerPath`. On failure `dest` is removed; a
 * LayerNotApplicable is thrown before anything is written.
 */
export async function unpackLayerOnParent(
  runner: CommandRunner,
  parentRootfs: string,
  layerPath: string,
  dest: string,
  timeoutMs: number,
): Promise<{ addedBytes: number }> {
  const entries = await readTarEntries(layerPath);
  const plan = planLayer(parentRootfs, entries);
  try {
    await runner.run("cp", ["-a", "--link", "--no-target-directory", "--", parentRootfs, dest], {
      timeoutMs,
    });
    // Whiteouts hide what the layers below have, so they go before the extract.
    for (const r of plan.remove) await rm(join(dest, r), { recursive: true, force: true });
    for (const d of plan.empty) {
      let names: string[] = [];
      try {
        names = readdirSync(join(dest, d));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      for (const n of names) await rm(join(dest, d, n), { recursive: true, force: true });
    }
    await runner.run(
      "tar",
      [
        "--extract",
        "--file",
        layerPath,
        "-C",
        dest,
        "--numeric-owner",
        "--same-owner",
        "--preserve-permissions",
        "--xattrs",
        "--xattrs-include=*",
        "--no-wildcards-match-slash",
        `--exclude=${WHITEOUT}*`,
      ],
      { timeoutMs },
    );
  } catch (e) {
    await rm(dest, { recursive: true, force: true });
    throw e;
  }
  const regular = entries.filter((e) => e.type === "0" || e.type === "\0" || e.type === "7");
  return { addedBytes: regular.reduce((n, e) => n + e.size, 0) };
}

/**
 * For a commit: makes `dest` the rootfs of the image `manifestDigest` (the
 * parent plus its last layer) from the parent's rootfs, and returns its
 * apparent size: the parent's plus the layer's file bytes (an estimate that
 * spares walking the whole tree; files the layer replaces or deletes are not
 * taken off). Undefined when the full unpack must do it instead: a rootless
 * store (tar cannot keep owners), or a layer this path does not take
 * (logged); `dest` is then absent.
 */
export async function unpackCommitOnParent(
  store: ResolvedImageStoreOptions,
  layout: OciLayout,
  parent: { rootfs: string; sizeBytes: number },
  manifestDigest: string,
  dest: string,
): Promise<number | undefined> {
  if (store.rootless) return undefined;
  const layer = layout.readJsonBlob<OciManifest>(manifestDigest).layers.at(-1);
  if (!layer || layer.mediaType !== LAYER_TAR_MEDIA_TYPE) return undefined;
  try {
    const { addedBytes } = await unpackLayerOnParent(
      store.runner,
      parent.rootfs,
      layout.blobPath(layer.digest),
      dest,
      store.transferTimeoutMs,
    );
    return parent.sizeBytes + addedBytes;
  } catch (e) {
    store.logger.warn(
      { manifest: manifestDigest, err: (e as Error).message.slice(0, 500) },
      "unpacking a committed layer on its parent failed; unpacking the whole image",
    );
    return undefined;
  }
}
