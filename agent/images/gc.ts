import { existsSync, readdirSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { ImageCatalog, ImageRecord } from "./catalog.ts";
import type { OciLayout } from "./oci-layout.ts";
import { treeBytes } from "./oci-layout.ts";
import type { ResolvedImageStoreOptions } from "./options.ts";
import { digestHex } from "./reference.ts";

export interface GcOptions {
  /**
   * Also remove images no container uses and none has used for this long.
   * Without it only leftovers go: rootfs dirs and layout tags the index does
   * not know, work dirs, and blobs no tag references. @default undefined
   */
  unusedForMs?: number;
  /** References or digests never removed by age (the default image is always kept). @default [] */
  keep?: string[];
}

export interface GcResult {
  removedImages: string[];
  /** Whole-image dirs of an older agent's store. */
  removedRootfsDirs: string[];
  /** Hex digests of the unpacked layers deleted: those no cached image names any more. */
  removedLayers: string[];
  removedBlobs: number;
  /** Bytes of layers, rootfs dirs and blobs deleted. */
  freedBytes: number;
}

/** What gc needs from the store, passed in so the store's internals stay private. */
export interface GcContext {
  options: ResolvedImageStoreOptions;
  layout: OciLayout;
  catalog: ImageCatalog;
  rootfsRoot: string;
  tmpRoot: string;
  inUse(digest: string): boolean;
  resolve(refOrDigest: string): string | undefined;
  detach(record: ImageRecord): string;
  /** Deletes the unpacked layers no image in the catalog names. */
  removeUnusedLayers(): Promise<{ removed: string[]; bytes: number }>;
}

/** Runs under the store's exclusive lock: no pull is writing blobs meanwhile. */
export async function runGc(ctx: GcContext, opts: GcOptions): Promise<GcResult> {
  const result: GcResult = {
    removedImages: [],
    removedRootfsDirs: [],
    removedLayers: [],
    removedBlobs: 0,
    freedBytes: 0,
  };
  const trash: string[] = [];

  if (opts.unusedForMs !== undefined) {
    if (!Number.isFinite(opts.unusedForMs) || opts.unusedForMs < 0) {
      throw new BerthError("invalid_request", "gc unusedForMs must be a non-negative number");
    }
    const keep = new Set<string>();
    for (const k of [...(opts.keep ?? []), ctx.options.defaultImage]) {
      const d = ctx.resolve(k);
      if (d) keep.add(d);
    }
    const cutoff = Date.now() - opts.unusedForMs;
    for (const record of ctx.catalog.records()) {
      if (keep.has(record.digest) || ctx.inUse(record.digest)) continue;
      if (Date.parse(record.lastUsedAt) > cutoff) continue;
      result.removedImages.push(record.digest);
      // A layered image's bytes are its layers', counted below when no other image keeps them.
      if (!record.layers) {
        result.freedBytes += record.sizeBytes;
        result.removedRootfsDirs.push(join(ctx.rootfsRoot, digestHex(record.digest)));
      }
      trash.push(ctx.detach(record));
    }
  }

  // Rootfs dirs the index does not name (an agent killed mid-remove, or a
  // rename that happened before the index write).
  const known = new Set(ctx.catalog.records().map((r) => digestHex(r.digest)));
  for (const name of readdirSync(ctx.rootfsRoot)) {
    if (known.has(name)) continue;
    const dir = join(ctx.rootfsRoot, name);
    result.freedBytes += await treeBytes(dir).catch(() => 0);
    result.removedRootfsDirs.push(dir);
    trash.push(dir);
  }
  for (const tag of ctx.layout.tags()) if (!known.has(tag)) ctx.layout.removeTag(tag);
  for (const name of existsSync(ctx.tmpRoot) ? readdirSync(ctx.tmpRoot) : [])
    trash.push(join(ctx.tmpRoot, name));
  for (const dir of trash) await rm(dir, { recursive: true, force: true });
  // A layer goes when no image names it any more (counted over the whole catalog).
  const layers = await ctx.removeUnusedLayers();
  result.removedLayers = layers.removed;
  result.freedBytes += layers.bytes;

  const before = ctx.layout.blobBytes();
  try {
    await ctx.options.runner.run(ctx.options.umoci, ["gc", "--layout", ctx.layout.dir], {
      timeoutMs: ctx.options.transferTimeoutMs,
    });
  } catch (e) {
    throw new BerthError(
      "internal",
      `umoci gc of ${ctx.layout.dir} failed: ${(e as Error).message.slice(0, 800)}`,
    );
  }
  const after = ctx.layout.blobBytes();
  result.removedBlobs = before.count - after.count;
  result.freedBytes += before.bytes - after.bytes;
  ctx.options.logger.info(
    {
      images: result.removedImages.length,
      layers: result.removedLayers.length,
      blobs: result.removedBlobs,
      bytes: result.freedBytes,
    },
    "image gc done",
  );
  return result;
}
