// Progress of a pull (docs/images.md, "Pull progress"). skopeo does the
// copy (TLS options, registries.conf, manifest conversion, every auth form
// stay its job) and prints no byte counts worth reading, so progress is
// measured from outside, on the disk it writes to:
//   - a blob is done when it is in the shared blob dir under its digest
//     (the OCI layout's own naming: stable, documented);
//   - the bytes of blobs still coming are the files skopeo is writing in the
//     private layout dir (it streams each blob to a temp file there, then
//     renames it into the blob dir). Whatever name they have, they count; a
//     skopeo that wrote elsewhere would only make progress coarser (per
//     blob), never wrong.
// The manifest gives the totals. Bytes never go down and the last report,
// after skopeo succeeded, is every blob done with bytesDone = bytesTotal.

import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { OciDescriptor } from "./oci-layout.ts";
import { digestHex, isDigest } from "./reference.ts";

/** Where a pull stands: blobs (config and layers) and bytes, as a push reports them. */
export interface PullProgress {
  /** The reference being pulled (canonical). */
  ref: string;
  /** Blobs in the cache (already there, or fetched) and in all (config and layers). */
  blobsDone: number;
  blobsTotal: number;
  bytesDone: number;
  bytesTotal: number;
  /** Blobs the cache already had: nothing was fetched for them. */
  blobsSkipped: number;
}

/** How often the disk is looked at while skopeo runs. */
export const PULL_POLL_MS = 250;

/** The config and layer descriptors of an image manifest (OCI or Docker schema 2); [] for anything else. */
export function manifestBlobs(raw: string): OciDescriptor[] {
  const m = JSON.parse(raw) as { config?: OciDescriptor; layers?: OciDescriptor[] };
  const blobs = [...(m.config ? [m.config] : []), ...(m.layers ?? [])];
  return blobs.filter((b) => isDigest(b.digest) && Number.isSafeInteger(b.size) && b.size >= 0);
}

/**
 * Runs `copy` (skopeo writing into `layoutDir`, blobs into `blobsDir`) and
 * reports progress while it runs; the final report only once it succeeded.
 */
export async function withPullProgress<T>(
  ref: string,
  blobs: OciDescriptor[],
  dirs: { layoutDir: string; blobsDir: string },
  onProgress: (p: PullProgress) => void,
  copy: () => Promise<T>,
): Promise<T> {
  const blobPath = (b: OciDescriptor) => join(dirs.blobsDir, "sha256", digestHex(b.digest));
  const cached = new Set(blobs.filter((b) => existsSync(blobPath(b))).map((b) => b.digest));
  const bytesTotal = blobs.reduce((n, b) => n + b.size, 0);
  let last: PullProgress = {
    ref,
    blobsDone: cached.size,
    blobsTotal: blobs.length,
    bytesDone: blobs.filter((b) => cached.has(b.digest)).reduce((n, b) => n + b.size, 0),
    bytesTotal,
    blobsSkipped: cached.size,
  };
  onProgress({ ...last });
  const look = () => {
    const landed = blobs.filter((b) => cached.has(b.digest) || existsSync(blobPath(b)));
    const inFlight = writingBytes(dirs.layoutDir);
    const bytesDone = Math.min(bytesTotal, landed.reduce((n, b) => n + b.size, 0) + inFlight);
    const next = {
      ...last,
      blobsDone: Math.max(last.blobsDone, landed.length),
      bytesDone: Math.max(last.bytesDone, bytesDone),
    };
    if (next.blobsDone !== last.blobsDone || next.bytesDone !== last.bytesDone) {
      last = next;
      onProgress({ ...last });
    }
  };
  const timer = setInterval(look, PULL_POLL_MS);
  try {
    const out = await copy();
    clearInterval(timer);
    if (last.blobsDone !== blobs.length || last.bytesDone !== bytesTotal)
      onProgress({ ...last, blobsDone: blobs.length, bytesDone: bytesTotal });
    return out;
  } finally {
    clearInterval(timer);
  }
}

/** Bytes of the files directly in the layout dir other than its own metadata: blobs being written. */
function writingBytes(layoutDir: string): number {
  let n = 0;
  let names: string[];
  try {
    names = readdirSync(layoutDir);
  } catch {
    return 0; // not made yet
  }
  for (const name of names) {
    if (name === "index.json" || name === "oci-layout") continue;
    try {
      const s = statSync(join(layoutDir, name));
      if (s.isFile()) n += s.size;
    } catch {
      // renamed into the blob dir between the listing and the stat: counted there next time
    }
  }
  return n;
}
