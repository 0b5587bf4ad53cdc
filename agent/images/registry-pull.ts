// A pull by digest over the distribution API (docs/images.md, "How a pull
// works"): the manifest and config first (small), then every layer at once,
// each streamed from the registry through a sha256 check into tar (and into
// the shared OCI layout, which keeps the blob for pushes and commits), so a
// layer is unpacked while it downloads and a big image takes about as long
// as its biggest layer. Each layer lands whole or not at all: it unpacks into
// a temp dir renamed into place only once its digest matched, and its blob
// is written to a temp file renamed likewise.

import { randomBytes } from "node:crypto";
import { createReadStream, existsSync, renameSync, writeFileSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import { RegistryClient, type RegistryEndpoint, registryAnswerError } from "../../shared/registry-client.ts";
import type { LayerStore } from "./layer-store.ts";
import { unpackLayer } from "./layer-unpack.ts";
import { type OciDescriptor, type OciLayout, type OciManifest, sha256Digest } from "./oci-layout.ts";
import type { ImageStoreLogger, ResolvedImageStoreOptions } from "./options.ts";
import type { BlobPeer, PeerBlobs } from "./peer-blobs.ts";
import { type PullProgress, PullProgressCounter } from "./pull-progress.ts";
import { DOCKER_HUB, type ImageReference } from "./reference.ts";

const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json";
const MANIFEST_ACCEPT = [OCI_MANIFEST, DOCKER_MANIFEST].join(", ");

/** Docker schema 2 media types and their OCI names, as skopeo converts them into an OCI layout. */
const OCI_NAME: Record<string, string> = {
  [DOCKER_MANIFEST]: OCI_MANIFEST,
  "application/vnd.docker.container.image.v1+json": "application/vnd.oci.image.config.v1+json",
  "application/vnd.docker.image.rootfs.diff.tar.gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.docker.image.rootfs.diff.tar": "application/vnd.oci.image.layer.v1.tar",
};

export interface StreamedPullContext {
  options: ResolvedImageStoreOptions;
  layout: OciLayout;
  layers: LayerStore;
  tmpRoot: string;
  /** The cluster's other agents, asked for a layer before the registry (peer-blobs.ts). */
  peers?: PeerBlobs;
  logger?: ImageStoreLogger;
}

export interface StreamedPullOptions {
  onProgress?: (p: PullProgress) => void;
  signal?: AbortSignal;
}

/** The host a reference's registry answers the API on (Docker Hub's is not docker.io). */
export function apiHost(registry: string): string {
  return registry === DOCKER_HUB ? "registry-1.docker.io" : registry;
}

/**
 * Fetches the image `digest` of `ref` into the shared layout and its layers
 * into the layer store, skipping what either has. Returns the layout's
 * manifest descriptor (OCI, converted from Docker schema 2 when need be),
 * written last, so the layout names an image only once all of it is there.
 */
export async function pullStreamed(
  ctx: StreamedPullContext,
  ref: ImageReference,
  digest: string,
  endpoint: RegistryEndpoint,
  opts: StreamedPullOptions = {},
): Promise<OciDescriptor> {
  const client = new RegistryClient(endpoint, ctx.options.fetch);
  const scope = `repository:${ref.repository}:pull`;
  const what = `${ref.canonical}@${digest}`;
  const res = await client.request(scope, {
    method: "GET",
    path: `/v2/${ref.repository}/manifests/${digest}`,
    headers: { accept: MANIFEST_ACCEPT },
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  if (!res.ok) throw await answerError(res, `the manifest of ${what}`);
  const raw = Buffer.from(await res.arrayBuffer());
  if (sha256Digest(raw) !== digest) {
    throw new BerthError(
      "unavailable",
      `the registry sent a manifest for ${what} that does not match its digest`,
    );
  }
  const { manifest, converted } = ociManifest(raw, what);
  const blobs = [manifest.config, ...manifest.layers];
  const progress = new PullProgressCounter(ref.canonical, blobs, opts.onProgress);
  const skipped = (b: OciDescriptor, isLayer: boolean) =>
    ctx.layout.hasBlob(b.digest) && (!isLayer || ctx.layers.has(b.digest));
  progress.start(blobs.filter((b, i) => skipped(b, i > 0)));

  const fetchBlob = async (b: OciDescriptor) => {
    const r = await client.request(scope, {
      method: "GET",
      path: `/v2/${ref.repository}/blobs/${b.digest}`,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (!r.ok || !r.body) throw await answerError(r, `blob ${b.digest} of ${what}`);
    return Readable.fromWeb(r.body as import("node:stream/web").ReadableStream<Uint8Array>);
  };
  // A blob is written beside the layout's blob dir and renamed in once checked.
  const tempBlob = () => join(ctx.tmpRoot, `blob-${randomBytes(8).toString("hex")}`);

  if (!skipped(manifest.config, false)) {
    const body = Buffer.concat(await (await fetchBlob(manifest.config)).toArray());
    if (sha256Digest(body) !== manifest.config.digest) {
      throw new BerthError(
        "unavailable",
        `the config of ${what} does not match its digest ${manifest.config.digest}`,
      );
    }
    const tmp = tempBlob();
    writeFileSync(tmp, body);
    renameSync(tmp, ctx.layout.blobPath(manifest.config.digest));
  }
  progress.done(manifest.config);

  const tools = { tar: ctx.options.tar, python: ctx.options.python, rootless: ctx.options.rootless };
  const abort = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, abort.signal]) : abort.signal;
  const pullLayer = async (layer: OciDescriptor) => {
    if (skipped(layer, true)) return;
    await ctx.layers.ensure(layer, async (dir) => {
      if (ctx.layout.hasBlob(layer.digest)) {
        // The blob is here (an earlier pull stopped before unpacking it): no need to fetch it again.
        await unpackLayer(tools, createReadStream(ctx.layout.blobPath(layer.digest)), layer, dir, { signal });
        return;
      }
      // Bytes only grow, also when a peer's attempt is retried from the registry.
      let seen = 0;
      const fill = async (body: Readable) => {
        const tmp = tempBlob();
        try {
          await unpackLayer(tools, body, layer, dir, {
            teePath: tmp,
            signal,
            onBytes: (n) => {
              if (n <= seen) return;
              seen = n;
              progress.bytes(layer, n);
            },
          });
          renameSync(tmp, ctx.layout.blobPath(layer.digest));
        } finally {
          await rm(tmp, { force: true });
        }
      };
      const peers = ctx.peers;
      if (!peers) return fill(await fetchBlob(layer));
      const lease = await peers.acquire(layer.digest, await peerList());
      let ok = false;
      try {
        if ("peer" in lease.source) {
          const peer = lease.source.peer;
          try {
            await fill(await peers.open(peer, layer.digest, signal));
            ok = true;
            return;
          } catch (e) {
            if (signal.aborted) throw e;
            // The registry is the source of truth: what a peer could not give comes from there.
            ctx.logger?.warn(
              { digest: layer.digest, peer: peer.agentId, err: (e as Error).message },
              "layer from a peer failed; fetching it from the registry",
            );
            await rm(dir, { recursive: true, force: true });
            await mkdir(dir);
          }
        }
        await fill(await fetchBlob(layer));
        ok = true;
      } finally {
        lease.end(ok);
      }
    });
    progress.done(layer);
  };
  // The peers are asked for once per pull, and only when a layer is missing.
  let peerListing: Promise<BlobPeer[]> | undefined;
  const peerList = () => {
    peerListing ??= (ctx.peers?.peers() ?? Promise.resolve([])).catch((e: unknown) => {
      ctx.logger?.warn({ err: (e as Error).message }, "cannot list the peers; layers come from the registry");
      return [];
    });
    return peerListing;
  };
  // One layer failing stops the others: the pull has failed anyway.
  await Promise.all(
    manifest.layers.map((l) =>
      pullLayer(l).catch((e) => {
        abort.abort();
        throw e;
      }),
    ),
  ).catch(async (e) => {
    if (opts.signal?.aborted) throw new BerthError("cancelled", `the pull of ${what} was cancelled`);
    throw e;
  });
  progress.finish();

  // An OCI manifest is kept byte for byte, so the layout's digest is the registry's.
  const bytes = converted ? Buffer.from(JSON.stringify(manifest)) : raw;
  const layoutDigest = sha256Digest(bytes);
  if (!existsSync(ctx.layout.blobPath(layoutDigest))) {
    const tmp = tempBlob();
    writeFileSync(tmp, bytes);
    renameSync(tmp, ctx.layout.blobPath(layoutDigest));
  }
  return { mediaType: OCI_MANIFEST, digest: layoutDigest, size: bytes.length };
}

interface WireManifest extends OciManifest {
  schemaVersion?: number;
  annotations?: Record<string, string>;
}

/** The manifest in OCI form (a Docker schema 2 one converted); refuses anything else. */
function ociManifest(raw: Buffer, what: string): { manifest: WireManifest; converted: boolean } {
  let m: WireManifest;
  try {
    m = JSON.parse(raw.toString("utf8")) as WireManifest;
  } catch {
    throw new BerthError("unavailable", `the manifest of ${what} is not JSON`);
  }
  const type = m.mediaType ?? OCI_MANIFEST;
  if ((type !== OCI_MANIFEST && type !== DOCKER_MANIFEST) || !m.config || !Array.isArray(m.layers)) {
    throw new BerthError("invalid_request", `${what} is a ${type}, not an image manifest berth can pull`);
  }
  const oci = (d: OciDescriptor): OciDescriptor => ({
    ...d,
    mediaType: OCI_NAME[d.mediaType] ?? d.mediaType,
  });
  if (type === OCI_MANIFEST) return { manifest: m, converted: false };
  const manifest: WireManifest = {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST,
    config: oci(m.config),
    layers: m.layers.map(oci),
    ...(m.annotations ? { annotations: m.annotations } : {}),
  };
  return { manifest, converted: true };
}

async function answerError(res: Response, what: string): Promise<BerthError> {
  if (res.status === 404) {
    await res.body?.cancel();
    return new BerthError("not_found", `the registry has no ${what}`);
  }
  return registryAnswerError(res, `fetching ${what}`);
}
