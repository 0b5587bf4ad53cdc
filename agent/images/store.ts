import {
  createReadStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
} from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { BerthError, isBerthError, notFound } from "../../shared/errors.ts";
import { ImageCatalog, type ImageRecord } from "./catalog.ts";
import type { ImageInfo, ImportOptions, PullOptions, RemoveResult } from "./image-info.ts";
import { type CommitLayerOptions, writeCommitBlobs } from "./commit.ts";
import { type GcOptions, type GcResult, runGc } from "./gc.ts";
import { buildLayoutFromRootfs, copyArchive, detectArchiveFormat } from "./import.ts";
import { LayerStore } from "./layer-store.ts";
import { unpackLayer } from "./layer-unpack.ts";
import {
  type OciDescriptor,
  OciLayout,
  type OciManifest,
  onlyManifest,
  platformManifestDigest,
  runtimeConfig,
} from "./oci-layout.ts";
import {
  type ImageStoreOptions,
  type ResolvedImageStoreOptions,
  resolveImageStoreOptions,
} from "./options.ts";
import {
  digestHex,
  type ImageReference,
  isDigest,
  parseImageReference,
  pinnedReference,
} from "./reference.ts";
import { apiHost, pullStreamed } from "./registry-pull.ts";
import type { BlobHolder } from "./blob-server.ts";
import { type PushProgress, pushImage } from "./push.ts";
import { clusterPushEndpoint, credentialsFingerprint, loginCredentials } from "./registry-access.ts";
import { inspectRawManifest, withRegistryAccess } from "./skopeo.ts";
import { SharedExclusiveLock } from "./sync.ts";
import { SingleFlight } from "../single-flight.ts";

/**
 * The agent's image cache. Layout under `root`:
 *   oci/              one OCI image layout, blobs shared by all images, tag = digest hex
 *   layers/<hex>/     each layer blob unpacked once, shared by every image that has it
 *   l/<id>            short links to layers/<hex>, what overlay mounts name (layer-store.ts)
 *   rootfs/<hex>/     images an older agent unpacked whole, used until removed
 *   tmp/              work dirs of running pulls; emptied when the store opens
 *   index.json        refs, digests and metadata (atomic rewrite)
 * One ImageStore per root: it assumes no other process writes there.
 */
export class ImageStore {
  readonly options: ResolvedImageStoreOptions;
  private readonly layout: OciLayout;
  private readonly catalog: ImageCatalog;
  private readonly layers: LayerStore;
  private readonly rootfsRoot: string;
  private readonly tmpRoot: string;
  /** The lower dir of an image with no layers: overlayfs needs one. */
  private readonly emptyLayer: string;
  /** Apparent bytes of each unpacked layer (hex), measured once. */
  private readonly layerBytes = new Map<string, number>();
  private readonly lock = new SharedExclusiveLock();
  private readonly pulls = new SingleFlight<ImageInfo>();
  private readonly unpacks = new SingleFlight<ImageRecord>();
  private readonly holders = new Map<string, Set<string>>();
  /** When each (reference, credentials) was last resolved against its registry; in memory only. */
  private readonly tagResolvedAt = new Map<string, number>();
  private opened = false;

  constructor(options: ImageStoreOptions) {
    this.options = resolveImageStoreOptions(options);
    this.layout = new OciLayout(join(this.options.root, "oci"));
    this.catalog = new ImageCatalog(join(this.options.root, "index.json"));
    this.rootfsRoot = join(this.options.root, "rootfs");
    this.tmpRoot = join(this.options.root, "tmp");
    this.emptyLayer = join(this.options.root, "empty");
    this.layers = new LayerStore(this.options.root, this.tmpRoot);
  }

  /** Creates the directories, loads the index and clears work left by a killed agent. */
  private open(): void {
    if (this.opened) return;
    mkdirSync(this.rootfsRoot, { recursive: true });
    mkdirSync(this.tmpRoot, { recursive: true, mode: 0o700 });
    mkdirSync(this.emptyLayer, { recursive: true });
    this.layers.ensureDirs();
    this.layout.ensure();
    this.catalog.load();
    for (const name of readdirSync(this.tmpRoot))
      rmSync(join(this.tmpRoot, name), { recursive: true, force: true });
    this.opened = true;
  }

  /** Where an older agent unpacked a whole image (records without `layers`). */
  private rootfsPath(digest: string): string {
    return join(this.rootfsRoot, digestHex(digest));
  }

  async pullDefault(opts: PullOptions = {}): Promise<ImageInfo> {
    return this.pull(undefined, opts);
  }

  /**
   * Makes `ref` (default: the configured default image) available locally.
   * The tag is resolved to a digest first; a digest already unpacked is not
   * fetched again. Concurrent pulls of one ref, or of refs with one digest,
   * share the work.
   */
  async pull(ref?: string, opts: PullOptions = {}): Promise<ImageInfo> {
    this.open();
    const parsed = parseImageReference(ref ?? this.options.defaultImage);
    const who =
      opts.credentials?.kind === "basic" ? opts.credentials.username : (opts.credentials?.kind ?? "");
    return this.pulls.run(`${parsed.canonical}\0${who}`, () =>
      this.lock.withShared(() => this.pullShared(parsed, opts)),
    );
  }

  private async pullShared(ref: ImageReference, opts: PullOptions): Promise<ImageInfo> {
    const knownDigest = this.catalog.digestOf(ref.canonical);
    const known = knownDigest ? this.cachedRecord(knownDigest) : undefined;
    // An imported name is local by definition: air-gapped hosts never ask a registry.
    if (known?.source === "import") return this.info(known, ref.canonical);
    if (ref.digest) {
      const pinned = this.cachedRecord(ref.digest);
      if (pinned) return this.tagged(pinned, ref.canonical);
    }
    // Keyed by the credentials too: a caller without them (or with others) must
    // not skip the registry's access check on the strength of someone else's pull.
    const freshnessKey = `${ref.canonical}\0${credentialsFingerprint(opts.credentials)}`;
    const startedAt = this.options.now();
    const resolvedAt = this.tagResolvedAt.get(freshnessKey);
    if (known && resolvedAt !== undefined && startedAt - resolvedAt <= this.options.tagFreshnessMs) {
      return this.info(known, ref.canonical);
    }
    const creds = await loginCredentials(this.options, ref.registry, opts.credentials);
    let resolved = false;
    const info = await withRegistryAccess(this.options, this.tmpRoot, ref, creds, async (access) => {
      let digest: string;
      try {
        const transportRef = ref.digest ? pinnedReference(ref, ref.digest) : ref.canonical;
        const raw = await inspectRawManifest(this.options, access, transportRef, opts.signal);
        const picked = platformManifestDigest(raw, this.options.platform);
        if (!picked) {
          const p = this.options.platform;
          throw new BerthError(
            "not_found",
            `image ${ref.canonical} has no ${p.os}/${p.architecture} variant`,
          );
        }
        digest = picked;
        resolved = true;
      } catch (e) {
        if (known && !opts.signal?.aborted && isBerthError(e) && e.code === "unavailable") {
          this.options.logger.warn(
            { ref: ref.canonical, err: e.message },
            "registry unreachable; using cached image",
          );
          return this.info(known, ref.canonical);
        }
        throw e;
      }
      const cached = this.cachedRecord(digest);
      if (cached) return this.tagged(cached, ref.canonical);
      this.options.logger.info({ ref: ref.canonical, digest }, "pulling image");
      const record = await this.unpacks.run(digest, () =>
        this.ensureImage(
          digest,
          "registry",
          () =>
            pullStreamed(
              {
                options: this.options,
                layout: this.layout,
                layers: this.layers,
                tmpRoot: this.tmpRoot,
                ...(this.options.peerBlobs ? { peers: this.options.peerBlobs } : {}),
                logger: this.options.logger,
              },
              ref,
              digest,
              {
                host: apiHost(ref.registry),
                insecure: access.insecure,
                ...(creds ? { credentials: { username: creds.username, password: creds.password } } : {}),
              },
              {
                ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
                ...(opts.signal ? { signal: opts.signal } : {}),
              },
            ),
          opts.signal,
        ),
      );
      return this.tagged(record, ref.canonical);
    });
    if (resolved && this.options.tagFreshnessMs > 0) this.tagResolvedAt.set(freshnessKey, startedAt);
    return info;
  }

  /**
   * Gets the image's blobs into the shared layout (via `fetch`, unless its tag
   * is already there) and unpacks each layer the layer store lacks (a fetch
   * may have unpacked them already, as they came). Each layer lands whole or
   * not at all (LayerStore.ensure), so a failed pull leaves only complete
   * layers, which the next attempt reuses or GC frees.
   */
  private async ensureImage(
    digest: string,
    source: ImageRecord["source"],
    fetch: (work: string) => Promise<OciDescriptor>,
    signal?: AbortSignal,
  ): Promise<ImageRecord> {
    const existing = this.cachedRecord(digest);
    if (existing) return existing;
    const hex = digestHex(digest);
    const work = mkdtempSync(join(this.tmpRoot, "work-"));
    try {
      let manifest = this.layout
        .readIndex()
        .manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === hex);
      if (!manifest || !this.layout.hasBlob(manifest.digest)) {
        manifest = await fetch(work);
        this.layout.setTag(hex, manifest);
      }
      const layers = this.layout.readJsonBlob<OciManifest>(manifest.digest).layers;
      await Promise.all(
        layers.map((layer) =>
          this.layers.ensure(layer, async (dir) => {
            const blob = createReadStream(this.layout.blobPath(layer.digest));
            await unpackLayer(this.unpackTools(), blob, layer, dir, signal ? { signal } : {});
          }),
        ),
      );
      let sizeBytes = 0;
      for (const layer of layers) sizeBytes += await this.bytesOfLayer(layer.digest);
      const now = new Date().toISOString();
      const record: ImageRecord = {
        digest,
        manifestDigest: manifest.digest,
        refs: [],
        source,
        layers: layers.map((l) => l.digest),
        sizeBytes,
        pulledAt: now,
        lastUsedAt: now,
        config: runtimeConfig(this.layout, manifest.digest),
      };
      this.catalog.put(record);
      return record;
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  private unpackTools() {
    const o = this.options;
    return { tar: o.tar, python: o.python, rootless: o.rootless };
  }

  private async bytesOfLayer(digest: string): Promise<number> {
    const hex = digestHex(digest);
    const known = this.layerBytes.get(hex);
    if (known !== undefined) return known;
    const n = await this.layers.bytes(digest);
    this.layerBytes.set(hex, n);
    return n;
  }

  /** Hex digests of the layers some cached image names. */
  private referencedLayers(): Set<string> {
    const keep = new Set<string>();
    for (const r of this.catalog.records()) for (const l of r.layers ?? []) keep.add(digestHex(l));
    return keep;
  }

  /** Imports a `docker save` tarball or an OCI archive (detected from its content). */
  async importArchive(path: string, opts: ImportOptions): Promise<ImageInfo> {
    this.open();
    const ref = parseImageReference(opts.name);
    return this.lock.withShared(async () => {
      const format = await detectArchiveFormat(this.options, path);
      const work = mkdtempSync(join(this.tmpRoot, "import-"));
      try {
        const layoutDir = join(work, "layout");
        await copyArchive(this.options, path, format, {
          layoutDir,
          tag: "import",
          sharedBlobDir: this.layout.blobsDir,
        });
        return await this.adoptImport(ref, onlyManifest(layoutDir));
      } finally {
        await rm(work, { recursive: true, force: true });
      }
    });
  }

  /** Turns a plain rootfs directory or tarball into a one-layer image named `opts.name`. */
  async importRootfs(source: string, opts: ImportOptions): Promise<ImageInfo> {
    this.open();
    const ref = parseImageReference(opts.name);
    return this.lock.withShared(async () => {
      const work = mkdtempSync(join(this.tmpRoot, "import-"));
      try {
        const layoutDir = await buildLayoutFromRootfs(this.options, source, work, "import");
        const manifest = onlyManifest(layoutDir);
        this.layout.adoptBlobs(layoutDir);
        return await this.adoptImport(ref, manifest);
      } finally {
        await rm(work, { recursive: true, force: true });
      }
    });
  }

  /**
   * Adds an image that is `base` (a cached image's reference or digest) plus
   * one layer, an uncompressed OCI layer tarball (moved into the store), known
   * as `opts.name` afterwards. Local like an import: never looked up in a registry.
   */
  async commitLayer(
    base: string,
    layerTar: string,
    opts: ImportOptions & CommitLayerOptions,
  ): Promise<ImageInfo> {
    this.open();
    const ref = parseImageReference(opts.name);
    return this.lock.withShared(async () => {
      const found = this.lookup(base);
      if (!found || !this.cachedRecord(found.record.digest)) throw notFound(`image ${base}`);
      // Only the new layer is unpacked: the parent's layers are in the layer store already.
      const manifest = await writeCommitBlobs(this.layout, found.record.manifestDigest, layerTar, opts);
      return this.adoptImport(ref, manifest);
    });
  }

  private async adoptImport(ref: ImageReference, manifest: OciDescriptor): Promise<ImageInfo> {
    const record = await this.unpacks.run(manifest.digest, () =>
      this.ensureImage(manifest.digest, "import", async () => manifest),
    );
    return this.tagged(record, ref.canonical);
  }

  /**
   * Pushes a cached image (its own bytes, so its digest stays) to the
   * cluster registry as `repository:tag`; returns `host/repository@digest`.
   * GC waits for it, so no blob goes while it is read.
   */
  async pushToCluster(
    refOrDigest: string,
    to: { repository: string; tag: string },
    opts: { onProgress?: (p: PushProgress) => void; signal?: AbortSignal } = {},
  ): Promise<string> {
    this.open();
    const endpoint = clusterPushEndpoint(this.options);
    return this.lock.withShared(async () => {
      const found = this.lookup(refOrDigest);
      if (!found) throw notFound(`image ${refOrDigest}`);
      return pushImage(
        this.layout,
        found.record.manifestDigest,
        { endpoint, ...to },
        { ...opts, send: this.options.fetch },
      );
    });
  }

  /** An image by canonical-able reference or by digest; undefined when not cached. */
  get(refOrDigest: string): ImageInfo | undefined {
    this.open();
    const found = this.lookup(refOrDigest);
    return found ? this.info(found.record, found.ref) : undefined;
  }

  list(): ImageInfo[] {
    this.open();
    return this.catalog
      .records()
      .filter((r) => this.isUnpacked(r))
      .map((r) => this.info(r));
  }

  /**
   * What the agent's tunnel serves to its peers (blob-server.ts): the
   * layout's blobs and this host's pulls in progress; undefined without
   * peerBlobs.
   */
  blobHolder(): BlobHolder | undefined {
    const peers = this.options.peerBlobs;
    if (!peers) return undefined;
    return {
      blobPath: (digest) => {
        this.open();
        return this.layout.hasBlob(digest) ? this.layout.blobPath(digest) : undefined;
      },
      peers,
    };
  }

  /**
   * Removes a reference; the image itself goes when no reference is left (or
   * when named by digest). Refused with Conflict while a container uses it.
   * Blobs no other image uses are freed by gc().
   */
  async remove(refOrDigest: string): Promise<RemoveResult> {
    this.open();
    return this.lock.withExclusive(async () => {
      const found = this.lookup(refOrDigest);
      if (!found) throw notFound(`image ${refOrDigest}`);
      const { record, ref } = found;
      if (ref && !isDigest(refOrDigest) && record.refs.length > 1) {
        this.catalog.untag(ref);
        return { untagged: [ref], removed: [] };
      }
      const refs = [...record.refs];
      const trash = this.detachImage(record);
      await rm(trash, { recursive: true, force: true });
      await this.layers.removeExcept(this.referencedLayers());
      return { untagged: refs, removed: [record.digest] };
    });
  }

  /**
   * Takes an image out of the index and layout and moves its rootfs aside, in
   * one synchronous step after the in-use check. Returns the dir to delete.
   */
  private detachImage(record: ImageRecord): string {
    const users = this.holders.get(record.digest);
    if (users && users.size > 0) {
      throw new BerthError(
        "conflict",
        `image ${record.refs[0] ?? record.digest} is in use by ${[...users].join(", ")}`,
        {
          digest: record.digest,
          holders: [...users],
        },
      );
    }
    this.layout.removeTag(digestHex(record.digest));
    this.catalog.delete(record.digest);
    const trash = join(this.tmpRoot, `trash-${digestHex(record.digest)}-${Date.now()}`);
    if (existsSync(this.rootfsPath(record.digest))) renameSync(this.rootfsPath(record.digest), trash);
    return trash;
  }

  /** Records that `holder` (a container) uses the image, which protects it from remove() and gc(). */
  markInUse(digest: string, holder: string): void {
    this.open();
    if (!this.catalog.byDigest(digest)) throw notFound(`image ${digest}`);
    const set = this.holders.get(digest) ?? new Set<string>();
    set.add(holder);
    this.holders.set(digest, set);
    this.catalog.touch(digest, new Date());
  }

  release(digest: string, holder: string): void {
    const set = this.holders.get(digest);
    if (!set) return;
    set.delete(holder);
    if (set.size === 0) this.holders.delete(digest);
    if (this.catalog.byDigest(digest)) this.catalog.touch(digest, new Date());
  }

  /** Removes unused images (see GcOptions), stray rootfs dirs and work dirs, then unreferenced blobs. */
  async gc(opts: GcOptions = {}): Promise<GcResult> {
    this.open();
    return this.lock.withExclusive(() =>
      runGc(
        {
          options: this.options,
          layout: this.layout,
          catalog: this.catalog,
          rootfsRoot: this.rootfsRoot,
          tmpRoot: this.tmpRoot,
          removeUnusedLayers: () => this.layers.removeExcept(this.referencedLayers()),
          inUse: (digest) => (this.holders.get(digest)?.size ?? 0) > 0,
          resolve: (refOrDigest) => this.lookup(refOrDigest)?.record.digest,
          detach: (record) => this.detachImage(record),
        },
        opts,
      ),
    );
  }

  private lookup(refOrDigest: string): { record: ImageRecord; ref?: string } | undefined {
    if (isDigest(refOrDigest)) {
      const record = this.catalog.byDigest(refOrDigest);
      return record ? { record } : undefined;
    }
    const ref = parseImageReference(refOrDigest);
    const digest = this.catalog.digestOf(ref.canonical) ?? ref.digest;
    const record = digest ? this.catalog.byDigest(digest) : undefined;
    return record ? { record, ref: ref.canonical } : undefined;
  }

  private cachedRecord(digest: string): ImageRecord | undefined {
    const record = this.catalog.byDigest(digest);
    return record && this.isUnpacked(record) ? record : undefined;
  }

  private isUnpacked(record: ImageRecord): boolean {
    if (!record.layers) return existsSync(this.rootfsPath(record.digest));
    return record.layers.every((l) => this.layers.has(l));
  }

  /** Overlay lower dirs, uppermost first. */
  private lowerDirs(record: ImageRecord): string[] {
    if (!record.layers) return [this.rootfsPath(record.digest)];
    if (record.layers.length === 0) return [this.emptyLayer];
    return record.layers.map((l) => this.layers.mountPath(l)).reverse();
  }

  private tagged(record: ImageRecord, canonicalRef: string): ImageInfo {
    this.catalog.tag(canonicalRef, record.digest);
    return this.info(this.catalog.byDigest(record.digest) ?? record, canonicalRef);
  }

  private info(record: ImageRecord, ref?: string): ImageInfo {
    return {
      ref: ref ?? record.refs[0] ?? record.digest,
      refs: [...record.refs],
      digest: record.digest,
      layers: this.lowerDirs(record),
      sizeBytes: record.sizeBytes,
      pulledAt: record.pulledAt,
      lastUsedAt: record.lastUsedAt,
      source: record.source,
      inUseBy: [...(this.holders.get(record.digest) ?? [])],
      config: record.config,
    };
  }
}
