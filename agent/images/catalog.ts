import { existsSync, readFileSync } from "node:fs";
import { BerthError } from "../../shared/errors.ts";
import { writeFileAtomic } from "./atomic.ts";
import type { ImageRuntimeConfig } from "./oci-layout.ts";

/** What the store remembers about one cached image (keyed by digest). */
export interface ImageRecord {
  /**
   * The cache key: the registry's manifest digest for pulled images (what a
   * user pins with `@sha256:`), the layout manifest digest for imports.
   */
  digest: string;
  /** The manifest in the shared OCI layout; differs from `digest` when skopeo converted a Docker manifest to OCI. */
  manifestDigest: string;
  refs: string[];
  source: "registry" | "import";
  /**
   * The image's layer blobs, base first, each unpacked once in the layer
   * store. Absent for an image an older agent unpacked whole into
   * rootfs/<hex>, which it keeps using until the image is removed.
   */
  layers?: string[];
  sizeBytes: number;
  pulledAt: string;
  lastUsedAt: string;
  config: ImageRuntimeConfig;
}

interface CatalogFile {
  version: 1;
  images: Record<string, ImageRecord>;
  /** Canonical reference → digest. */
  refs: Record<string, string>;
}

/**
 * The store's index (ref → digest and per-image metadata), one JSON file
 * rewritten atomically after each change so it survives agent restarts.
 * Every method is synchronous, so one read-modify-write never interleaves
 * with another in this process.
 */
export class ImageCatalog {
  private data: CatalogFile = { version: 1, images: {}, refs: {} };

  constructor(private readonly path: string) {}

  load(): void {
    if (!existsSync(this.path)) return;
    let parsed: CatalogFile;
    try {
      parsed = JSON.parse(readFileSync(this.path, "utf8")) as CatalogFile;
    } catch (e) {
      throw new BerthError("internal", `image index ${this.path} is unreadable: ${(e as Error).message}`);
    }
    if (parsed.version !== 1 || typeof parsed.images !== "object" || typeof parsed.refs !== "object") {
      throw new BerthError("internal", `image index ${this.path} has an unknown format`);
    }
    this.data = parsed;
  }

  private save(): void {
    writeFileAtomic(this.path, JSON.stringify(this.data, null, 1));
  }

  records(): ImageRecord[] {
    return Object.values(this.data.images);
  }

  byDigest(digest: string): ImageRecord | undefined {
    return this.data.images[digest];
  }

  digestOf(canonicalRef: string): string | undefined {
    return this.data.refs[canonicalRef];
  }

  put(record: ImageRecord): void {
    this.data.images[record.digest] = record;
    for (const r of record.refs) this.data.refs[r] = record.digest;
    this.save();
  }

  /** Points `ref` at `digest`, taking it off whatever image it named before. */
  tag(canonicalRef: string, digest: string): void {
    const record = this.data.images[digest];
    if (!record) throw new BerthError("internal", `image ${digest} is not in the index`);
    const previous = this.data.refs[canonicalRef];
    // Every pull of a cached tag lands here: no rewrite (and fsync) when nothing changes.
    if (previous === digest && record.refs.includes(canonicalRef)) return;
    if (previous && previous !== digest) {
      const old = this.data.images[previous];
      if (old) old.refs = old.refs.filter((r) => r !== canonicalRef);
    }
    this.data.refs[canonicalRef] = digest;
    if (!record.refs.includes(canonicalRef)) record.refs.push(canonicalRef);
    this.save();
  }

  untag(canonicalRef: string): void {
    const digest = this.data.refs[canonicalRef];
    if (!digest) return;
    delete this.data.refs[canonicalRef];
    const record = this.data.images[digest];
    if (record) record.refs = record.refs.filter((r) => r !== canonicalRef);
    this.save();
  }

  touch(digest: string, at: Date): void {
    const record = this.data.images[digest];
    if (!record) return;
    record.lastUsedAt = at.toISOString();
    this.save();
  }

  delete(digest: string): void {
    const record = this.data.images[digest];
    if (!record) return;
    for (const r of record.refs) if (this.data.refs[r] === digest) delete this.data.refs[r];
    delete this.data.images[digest];
    this.save();
  }
}
