// Content-addressed code archives on the agent: `<root>/<sha256>/` is an
// overlay layer whose `mnt/code/` holds the unpacked tree. Containers get it
// as the uppermost lower dir of their root overlay (never a bind mount), so
// their working directory /mnt/code is writable through their own upper dir
// (on their disk, within its quota, gone with the container) while the tree
// stays shared and unchanged underneath. An archive is streamed to a temp
// file while hashed, checked (hash, entry types, paths), unpacked into a temp
// dir and renamed into place, so a tree under its final name is always
// complete; every failure removes what it wrote.

import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { BerthError, invalid } from "../../shared/errors.ts";
import { checkTarGz } from "./tar-check.ts";

const run = promisify(execFile);

export const MAX_CODE_ARCHIVE_BYTES = 256 * 1024 * 1024;
export const MAX_CODE_UNPACKED_BYTES = 4 * 1024 * 1024 * 1024;
export const MAX_CODE_ENTRIES = 200_000;
const SHA256_RE = /^[0-9a-f]{64}$/;
const TMP_PREFIX = ".tmp-";
/** A tree an older agent unpacked at `<sha>/` itself, set aside (a container from then may still mount it). */
const PRE_LAYER_PREFIX = ".pre-layer-";
/** Where the tree lies inside its layer: the runner's working directory (RunnerPaths.code). */
const TREE_IN_LAYER = join("mnt", "code");

/** Lower-cased sha256 hex; invalid_request unless 64 hex digits. */
export function checkSha256(sha256: unknown): string {
  const s = typeof sha256 === "string" ? sha256.toLowerCase() : "";
  if (!SHA256_RE.test(s)) {
    throw invalid(`sha256 must be 64 hex digits, got ${JSON.stringify(sha256)}`, { field: "sha256" });
  }
  return s;
}

export interface CodeStoreOptions {
  /** @default MAX_CODE_ARCHIVE_BYTES */
  maxArchiveBytes?: number;
  /** @default MAX_CODE_UNPACKED_BYTES */
  maxUnpackedBytes?: number;
}

export class CodeStore {
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly maxArchiveBytes: number;
  private readonly maxUnpackedBytes: number;

  /** Removes temp files and dirs a killed agent left behind. */
  constructor(
    readonly root: string,
    opts: CodeStoreOptions = {},
  ) {
    this.maxArchiveBytes = opts.maxArchiveBytes ?? MAX_CODE_ARCHIVE_BYTES;
    this.maxUnpackedBytes = opts.maxUnpackedBytes ?? MAX_CODE_UNPACKED_BYTES;
    mkdirSync(root, { recursive: true, mode: 0o755 });
    for (const name of readdirSync(root)) {
      if (name.startsWith(TMP_PREFIX)) rmSync(join(root, name), { recursive: true, force: true });
    }
  }

  /** The unpacked tree of `sha256` (which may not exist): `<layer>/mnt/code`. */
  dir(sha256: string): string {
    return join(this.layer(sha256), TREE_IN_LAYER);
  }

  /** The overlay lower dir holding the tree at mnt/code. */
  layer(sha256: string): string {
    return join(this.root, checkSha256(sha256));
  }

  has(sha256: string): boolean {
    try {
      return statSync(this.dir(sha256)).isDirectory();
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "ENOTDIR") return false;
      throw e;
    }
  }

  /**
   * Stores the archive unless it is already here. Concurrent puts of one
   * hash share the first; when that one fails, the next tries with its own data.
   */
  async put(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    const sha = checkSha256(sha256);
    for (;;) {
      if (this.has(sha)) return;
      const running = this.inFlight.get(sha);
      if (!running) break;
      await running.catch(() => {});
    }
    const p = this.unpack(sha, data);
    this.inFlight.set(sha, p);
    try {
      await p;
    } finally {
      this.inFlight.delete(sha);
    }
  }

  private async unpack(sha: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    const tag = `${TMP_PREFIX}${sha.slice(0, 12)}-${randomBytes(4).toString("hex")}`;
    const archive = join(this.root, `${tag}.tar.gz`);
    const tree = join(this.root, tag);
    try {
      const got = await this.receive(archive, data);
      if (got !== sha) {
        throw invalid(`code archive hash mismatch: expected sha256 ${sha}, the data hashes to ${got}`, {
          expected: sha,
          actual: got,
        });
      }
      await checkTarGz(archive, { maxUnpackedBytes: this.maxUnpackedBytes, maxEntries: MAX_CODE_ENTRIES });
      const unpacked = join(tree, TREE_IN_LAYER);
      mkdirSync(unpacked, { recursive: true, mode: 0o755 });
      await tar(["--no-same-owner", "--no-same-permissions", "-xzf", archive, "-C", unpacked]);
      // Whatever modes the archive carried, the runner (any uid) reads the tree; nobody but root writes it.
      await run("chmod", ["-R", "u+rwX,go+rX,go-w", tree]);
      this.setAsideOlderLayout(sha);
      await rename(tree, this.layer(sha)).catch(async (e: NodeJS.ErrnoException) => {
        // Another agent process won the race with the same content.
        if (e.code !== "ENOTEMPTY" && e.code !== "EEXIST") throw e;
      });
    } finally {
      await rm(archive, { force: true });
      await rm(tree, { recursive: true, force: true });
    }
  }

  /**
   * An older agent's tree at `<sha>/` (no mnt/code inside) would block the
   * rename: it is moved aside, not deleted, since a container started before
   * the upgrade may still have it mounted.
   */
  private setAsideOlderLayout(sha: string): void {
    const layer = this.layer(sha);
    if (!existsSync(layer) || existsSync(this.dir(sha))) return;
    renameSync(
      layer,
      join(this.root, `${PRE_LAYER_PREFIX}${sha.slice(0, 12)}-${randomBytes(4).toString("hex")}`),
    );
  }

  /** Writes the stream to `file`, hashing it; refuses past the size limit. */
  private async receive(file: string, data: AsyncIterable<Uint8Array>): Promise<string> {
    const hash = createHash("sha256");
    const out = createWriteStream(file, { mode: 0o600 });
    const closed = new Promise<void>((resolve, reject) => {
      out.on("close", resolve);
      out.on("error", reject);
    });
    let size = 0;
    try {
      for await (const chunk of data) {
        size += chunk.byteLength;
        if (size > this.maxArchiveBytes) {
          throw new BerthError(
            "resource_exhausted",
            `code archive is over the limit of ${this.maxArchiveBytes} bytes (${this.maxArchiveBytes / 1024 / 1024} MiB)`,
            { limitBytes: this.maxArchiveBytes },
          );
        }
        hash.update(chunk);
        if (!out.write(chunk)) await new Promise<void>((r) => out.once("drain", r));
      }
    } finally {
      out.end();
      await closed;
    }
    return hash.digest("hex");
  }
}

async function tar(args: string[]): Promise<void> {
  try {
    await run("tar", args, { maxBuffer: 4 * 1024 * 1024 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw invalid(`code archive does not unpack: ${(err.stderr || err.message).trim().slice(-1000)}`);
  }
}
