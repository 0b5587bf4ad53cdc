// What a pull reports while it runs (docs/images.md, "Pull progress"): the
// store fetches every blob itself (registry-pull.ts), so the counts are the
// bytes read from the registry, exact, not guessed from the disk.

import type { OciDescriptor } from "./oci-layout.ts";

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

/** A report at most every this many bytes of one layer, and after each blob. */
export const PULL_REPORT_BYTES = 4 * 1024 * 1024;

/**
 * Counts a pull's blobs and bytes (layers arrive in parallel) and reports
 * when a blob is done or another PULL_REPORT_BYTES came in. Bytes never go
 * down; the last report is every blob and byte done.
 */
export class PullProgressCounter {
  private readonly got = new Map<string, number>();
  private readonly finished = new Set<string>();
  private readonly total: number;
  private skipped = 0;
  private reportedBytes = 0;

  constructor(
    private readonly ref: string,
    private readonly blobs: OciDescriptor[],
    private readonly onProgress?: (p: PullProgress) => void,
  ) {
    this.total = blobs.reduce((n, b) => n + b.size, 0);
  }

  /** The first report: what the cache already has counts as done and skipped. */
  start(cached: OciDescriptor[]): void {
    for (const b of cached) {
      if (this.finished.has(b.digest)) continue;
      this.finished.add(b.digest);
      this.got.set(b.digest, b.size);
      this.skipped++;
    }
    this.report();
  }

  bytes(blob: OciDescriptor, n: number): void {
    this.got.set(blob.digest, Math.min(n, blob.size));
    if (this.sum() - this.reportedBytes >= PULL_REPORT_BYTES) this.report();
  }

  done(blob: OciDescriptor): void {
    if (this.finished.has(blob.digest)) return;
    this.finished.add(blob.digest);
    this.got.set(blob.digest, blob.size);
    this.report();
  }

  finish(): void {
    for (const b of this.blobs) this.done(b);
  }

  private sum(): number {
    let n = 0;
    for (const v of this.got.values()) n += v;
    return n;
  }

  private report(): void {
    if (!this.onProgress) return;
    const bytesDone = Math.min(this.total, this.sum());
    this.reportedBytes = bytesDone;
    const blobsDone = this.blobs.filter((b) => this.finished.has(b.digest)).length;
    this.onProgress({
      ref: this.ref,
      blobsDone,
      blobsTotal: this.blobs.length,
      bytesDone,
      bytesTotal: this.total,
      blobsSkipped: this.skipped,
    });
  }
}
