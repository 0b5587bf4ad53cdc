import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { lstat, opendir } from "node:fs/promises";
import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import { writeFileAtomic } from "./atomic.ts";
import { digestHex, isDigest } from "./reference.ts";

export interface OciDescriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { os?: string; architecture?: string; variant?: string };
}

export interface OciIndex {
  schemaVersion: 2;
  mediaType?: string;
  manifests: OciDescriptor[];
}

export interface OciManifest {
  mediaType?: string;
  config: OciDescriptor;
  layers: OciDescriptor[];
}

/** The parts of an image config a container runtime uses. */
export interface ImageRuntimeConfig {
  env: string[];
  cmd: string[];
  entrypoint: string[];
  workingDir: string;
  user: string;
}

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

const REF_NAME = "org.opencontainers.image.ref.name";
const LIST_TYPES = new Set([
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
]);

/**
 * The one OCI image layout shared by every cached image: blobs are stored
 * once however many images use them, and each image is tagged by the hex of
 * its digest. index.json is only rewritten whole (temp + rename).
 */
export class OciLayout {
  readonly blobsDir: string;

  constructor(readonly dir: string) {
    this.blobsDir = join(dir, "blobs");
  }

  ensure(): void {
    mkdirSync(join(this.blobsDir, "sha256"), { recursive: true });
    const marker = join(this.dir, "oci-layout");
    if (!existsSync(marker)) writeFileAtomic(marker, JSON.stringify({ imageLayoutVersion: "1.0.0" }));
    if (!existsSync(join(this.dir, "index.json"))) this.writeIndex({ schemaVersion: 2, manifests: [] });
  }

  blobPath(digest: string): string {
    return join(this.blobsDir, "sha256", digestHex(digest));
  }

  hasBlob(digest: string): boolean {
    return existsSync(this.blobPath(digest));
  }

  readIndex(): OciIndex {
    return readLayoutIndex(this.dir);
  }

  private writeIndex(index: OciIndex): void {
    writeFileAtomic(join(this.dir, "index.json"), JSON.stringify(index));
  }

  tags(): string[] {
    return this.readIndex()
      .manifests.map((m) => m.annotations?.[REF_NAME])
      .filter((t): t is string => !!t);
  }

  /** Points `tag` at `manifest` (read, modified and written without yielding). */
  setTag(tag: string, manifest: OciDescriptor): void {
    const index = this.readIndex();
    const manifests = index.manifests.filter((m) => m.annotations?.[REF_NAME] !== tag);
    manifests.push({
      mediaType: manifest.mediaType,
      digest: manifest.digest,
      size: manifest.size,
      annotations: { [REF_NAME]: tag },
    });
    this.writeIndex({ ...index, manifests });
  }

  removeTag(tag: string): void {
    const index = this.readIndex();
    const manifests = index.manifests.filter((m) => m.annotations?.[REF_NAME] !== tag);
    if (manifests.length !== index.manifests.length) this.writeIndex({ ...index, manifests });
  }

  readJsonBlob<T>(digest: string): T {
    return JSON.parse(readFileSync(this.blobPath(digest), "utf8")) as T;
  }

  /** Moves the blobs of a private layout into this one; existing blobs are kept. */
  adoptBlobs(fromLayoutDir: string): void {
    const from = join(fromLayoutDir, "blobs", "sha256");
    if (!existsSync(from)) return;
    for (const name of readdirSync(from)) {
      const target = join(this.blobsDir, "sha256", name);
      if (existsSync(target)) rmSync(join(from, name), { force: true });
      else renameSync(join(from, name), target);
    }
  }

  /** Sum of the on-disk sizes of every blob, for reporting what GC freed. */
  blobBytes(): { count: number; bytes: number } {
    let count = 0;
    let bytes = 0;
    const dir = join(this.blobsDir, "sha256");
    if (!existsSync(dir)) return { count, bytes };
    for (const name of readdirSync(dir)) {
      count++;
      bytes += statSync(join(dir, name)).size;
    }
    return { count, bytes };
  }
}

export function readLayoutIndex(dir: string): OciIndex {
  const text = readFileSync(join(dir, "index.json"), "utf8");
  const index = JSON.parse(text) as OciIndex;
  if (!Array.isArray(index.manifests)) {
    throw new BerthError("internal", `${join(dir, "index.json")} is not an OCI index`);
  }
  return index;
}

/** The single image manifest in a layout skopeo or umoci just wrote. */
export function onlyManifest(dir: string): OciDescriptor {
  const index = readLayoutIndex(dir);
  if (index.manifests.length !== 1) {
    throw new BerthError("invalid_request", `expected one image in ${dir}, found ${index.manifests.length}`);
  }
  return index.manifests[0]!;
}

export function sha256Digest(bytes: Buffer | string): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

/** Go's GOARCH for this process, which is what registries label platforms with. */
export function hostPlatform(): Platform {
  const arch: Record<string, string> = {
    x64: "amd64",
    arm64: "arm64",
    arm: "arm",
    ia32: "386",
    ppc64: "ppc64le",
  };
  return { os: "linux", architecture: arch[process.arch] ?? process.arch };
}

/**
 * The digest skopeo will copy for `raw` (a manifest as the registry sent it):
 * the manifest's own digest, or for a multi-platform list the entry for
 * `platform`. Undefined when the list has no such platform.
 */
export function platformManifestDigest(raw: string, platform: Platform): string | undefined {
  const parsed = JSON.parse(raw) as { mediaType?: string; manifests?: OciDescriptor[] };
  const isList =
    (parsed.mediaType && LIST_TYPES.has(parsed.mediaType)) || (!parsed.mediaType && parsed.manifests);
  if (!isList) return sha256Digest(raw);
  const entries = (parsed.manifests ?? []).filter(
    (m) => m.platform?.os === platform.os && m.platform?.architecture === platform.architecture,
  );
  const exact = platform.variant ? entries.find((m) => m.platform?.variant === platform.variant) : undefined;
  const pick = exact ?? entries[0];
  return pick && isDigest(pick.digest) ? pick.digest : undefined;
}

export function runtimeConfig(layout: OciLayout, manifestDigest: string): ImageRuntimeConfig {
  const manifest = layout.readJsonBlob<OciManifest>(manifestDigest);
  const cfg = layout.readJsonBlob<{ config?: Record<string, unknown> }>(manifest.config.digest).config ?? {};
  const strings = (v: unknown) =>
    Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
  return {
    env: strings(cfg.Env),
    cmd: strings(cfg.Cmd),
    entrypoint: strings(cfg.Entrypoint),
    workingDir: typeof cfg.WorkingDir === "string" ? cfg.WorkingDir : "",
    user: typeof cfg.User === "string" ? cfg.User : "",
  };
}

/** Apparent size of a directory tree (files and symlinks, not following links). */
export async function treeBytes(dir: string): Promise<number> {
  let total = 0;
  const stack = [dir];
  while (stack.length > 0) {
    const d = stack.pop()!;
    for await (const ent of await opendir(d)) {
      const p = join(d, ent.name);
      if (ent.isDirectory()) stack.push(p);
      else if (ent.isFile() || ent.isSymbolicLink()) total += (await lstat(p)).size;
    }
  }
  return total;
}
