// An image made of a cached image plus one layer (a container's writes,
// agent/snapshots): the layer, a config with its diff_id and history entry,
// and a manifest are added to the shared layout as blobs. Nothing names them
// until the store tags the manifest, so a failure leaves only blobs gc frees.

import { createHash } from "node:crypto";
import { copyFileSync, createReadStream, renameSync, rmSync, writeFileSync } from "node:fs";
import { BerthError } from "../../shared/errors.ts";
import { type OciDescriptor, type OciLayout, type OciManifest, sha256Digest } from "./oci-layout.ts";

export const LAYER_TAR_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar";
const OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json";

export interface CommitLayerOptions {
  /** A line for the image history (`docker history` shows it). */
  comment?: string;
}

async function fileDigest(path: string): Promise<{ digest: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 })) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { digest: `sha256:${hash.digest("hex")}`, size };
}

/** Moves (or, across file systems, copies) a file into the layout as a blob. */
function adoptFileBlob(layout: OciLayout, path: string, digest: string): void {
  if (layout.hasBlob(digest)) {
    rmSync(path, { force: true });
    return;
  }
  const target = layout.blobPath(digest);
  try {
    renameSync(path, target);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
    const tmp = `${target}.tmp-${process.pid}`;
    try {
      copyFileSync(path, tmp);
      renameSync(tmp, target);
    } finally {
      rmSync(tmp, { force: true });
      rmSync(path, { force: true });
    }
  }
}

function writeJsonBlob(layout: OciLayout, value: unknown): { digest: string; size: number } {
  const bytes = Buffer.from(JSON.stringify(value));
  const digest = sha256Digest(bytes);
  if (!layout.hasBlob(digest)) {
    const tmp = `${layout.blobPath(digest)}.tmp-${process.pid}`;
    writeFileSync(tmp, bytes);
    renameSync(tmp, layout.blobPath(digest));
  }
  return { digest, size: bytes.length };
}

/**
 * Adds `layerTar` (an uncompressed layer tarball; moved, not copied, when it
 * lies on the layout's file system) on top of the image whose manifest is
 * `baseManifestDigest`. Returns the new manifest's descriptor.
 */
export async function writeCommitBlobs(
  layout: OciLayout,
  baseManifestDigest: string,
  layerTar: string,
  opts: CommitLayerOptions = {},
): Promise<OciDescriptor> {
  const base = layout.readJsonBlob<OciManifest & Record<string, unknown>>(baseManifestDigest);
  if (!base.config?.digest || !Array.isArray(base.layers)) {
    throw new BerthError("internal", `manifest ${baseManifestDigest} is not an image manifest`);
  }
  const config = layout.readJsonBlob<Record<string, unknown>>(base.config.digest);
  const layer = await fileDigest(layerTar);
  adoptFileBlob(layout, layerTar, layer.digest);
  const now = new Date().toISOString();
  const rootfs = (config.rootfs ?? { type: "layers", diff_ids: [] }) as { type: string; diff_ids: string[] };
  const history = Array.isArray(config.history) ? config.history : [];
  const newConfig = {
    ...config,
    created: now,
    rootfs: { type: rootfs.type ?? "layers", diff_ids: [...(rootfs.diff_ids ?? []), layer.digest] },
    history: [...history, { created: now, created_by: "berth commit", comment: opts.comment ?? "" }],
  };
  const cfg = writeJsonBlob(layout, newConfig);
  const manifest = {
    ...base,
    config: { ...base.config, digest: cfg.digest, size: cfg.size },
    layers: [...base.layers, { mediaType: LAYER_TAR_MEDIA_TYPE, digest: layer.digest, size: layer.size }],
  };
  const m = writeJsonBlob(layout, manifest);
  return { mediaType: base.mediaType ?? OCI_MANIFEST_MEDIA_TYPE, digest: m.digest, size: m.size };
}
