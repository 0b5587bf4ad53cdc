// The agent's unpacked layers, one directory per layer blob, shared by every
// image that has the layer (docs/images.md, "Where the cache lives"):
//
//   layers/<hex>/   the layer of blob sha256:<hex>, unpacked in overlay form
//                   (layer-unpack.ts); renamed into place when complete, so
//                   it holds a whole layer or does not exist
//   l/<id>          a short symlink to ../layers/<hex>: what an overlay mount
//                   names, so a deep image still fits the kernel's one-page
//                   limit on mount options (the runtime also mounts with
//                   names relative to l/ when the absolute ones are too long)
//
// Which images use a layer is the catalog's business: the store removes the
// layers no record names (ImageStore.remove and gc).

import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readlinkSync,
  renameSync,
  symlinkSync,
} from "node:fs";
import { rm, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { OciDescriptor } from "./oci-layout.ts";
import { treeBytes } from "./oci-layout.ts";
import { digestHex } from "./reference.ts";
import { SingleFlight } from "../single-flight.ts";

/** Short names first; a longer prefix only when a shorter one is some other layer's. */
const LINK_LENGTHS = [12, 20, 32, 64];

export class LayerStore {
  readonly layersDir: string;
  readonly linksDir: string;
  private readonly unpacking = new SingleFlight<void>();

  constructor(
    root: string,
    private readonly tmpRoot: string,
  ) {
    this.layersDir = join(root, "layers");
    this.linksDir = join(root, "l");
  }

  ensureDirs(): void {
    mkdirSync(this.layersDir, { recursive: true });
    mkdirSync(this.linksDir, { recursive: true });
  }

  dirOf(digest: string): string {
    return join(this.layersDir, digestHex(digest));
  }

  has(digest: string): boolean {
    return existsSync(this.dirOf(digest));
  }

  /** Hex digests of every layer on disk. */
  list(): string[] {
    return existsSync(this.layersDir) ? readdirSync(this.layersDir) : [];
  }

  /**
   * Makes sure the layer is unpacked: `unpack(dir)` fills a fresh temp dir,
   * which is renamed to layers/<hex> only when it resolves. Concurrent calls
   * for one layer share the work; a failure leaves nothing behind.
   */
  async ensure(layer: OciDescriptor, unpack: (dir: string) => Promise<void>): Promise<void> {
    if (this.has(layer.digest)) return;
    await this.unpacking.run(layer.digest, async () => {
      if (this.has(layer.digest)) return;
      const work = mkdtempSync(join(this.tmpRoot, "layer-"));
      try {
        await unpack(work);
        renameSync(work, this.dirOf(layer.digest));
      } catch (e) {
        await rm(work, { recursive: true, force: true });
        throw e;
      }
    });
  }

  /**
   * The short path an overlay mount names for the layer (l/<id>, made on
   * first use). The link is derived from the digest alone, so a crash between
   * the layer's rename and the link costs nothing: the next call makes it.
   */
  mountPath(digest: string): string {
    const hex = digestHex(digest);
    const target = join("..", "layers", hex);
    for (const n of LINK_LENGTHS) {
      const link = join(this.linksDir, hex.slice(0, n));
      let current: string | undefined;
      try {
        current = readlinkSync(link);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      if (current === target) return link;
      if (current === undefined) {
        try {
          symlinkSync(target, link);
        } catch (e) {
          // Another pull made the same link meanwhile; re-read it on the next turn.
          if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
          if (readlinkSync(link) !== target) continue;
        }
        return link;
      }
    }
    return this.dirOf(digest);
  }

  async bytes(digest: string): Promise<number> {
    return treeBytes(this.dirOf(digest));
  }

  /**
   * Deletes the layers not in `keep` (hex digests) and links that lead
   * nowhere; returns the hex digests removed and their bytes. The caller
   * makes sure no pull is adding a layer meanwhile (the store's lock).
   */
  async removeExcept(keep: Set<string>): Promise<{ removed: string[]; bytes: number }> {
    const removed: string[] = [];
    let bytes = 0;
    for (const hex of this.list()) {
      if (keep.has(hex)) continue;
      const dir = join(this.layersDir, hex);
      bytes += await treeBytes(dir).catch(() => 0);
      // Out of sight first, so no later mount can name a half-deleted layer.
      const trash = join(this.tmpRoot, `trash-layer-${hex}-${Date.now()}`);
      renameSync(dir, trash);
      await rm(trash, { recursive: true, force: true });
      removed.push(hex);
    }
    for (const name of existsSync(this.linksDir) ? readdirSync(this.linksDir) : []) {
      const link = join(this.linksDir, name);
      const hex = readlinkSync(link).split("/").at(-1) ?? "";
      if (!existsSync(join(this.layersDir, hex))) await unlink(link).catch(() => {});
    }
    return { removed, bytes };
  }
}
