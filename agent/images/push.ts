// Pushing an image of the agent's store to a registry (docs/images.md, "The
// cluster registry"): every blob the manifest names (config and layers) that
// the registry lacks is uploaded (POST, then one PUT of the whole blob), then
// the manifest is PUT under the tag. The bytes are the store's own, so the
// pushed manifest digest is the store's digest: another agent that pulls it
// gets the same image id and the builder's own store answers a pull of it
// from its cache.

import { createReadStream, readFileSync, statSync } from "node:fs";
import { Readable, Transform } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import { RegistryClient, type RegistryEndpoint, registryAnswerError } from "../../shared/registry-client.ts";
import type { OciDescriptor, OciLayout, OciManifest } from "./oci-layout.ts";

/** Where a push stands: after each blob, and every few MiB of a large one. */
export interface PushProgress {
  /** The reference being pushed (registry/repository:tag). */
  ref: string;
  /** Blobs finished (uploaded or already there) and in all (config and layers). */
  blobsDone: number;
  blobsTotal: number;
  bytesDone: number;
  bytesTotal: number;
  /** Blobs the registry already had. */
  blobsSkipped: number;
}

export interface PushTarget {
  endpoint: RegistryEndpoint;
  repository: string;
  tag: string;
}

const PROGRESS_EVERY_BYTES = 4 * 1024 * 1024;

/**
 * Pushes the image whose manifest is `manifestDigest` in `layout`; returns
 * `registry/repository@digest`. Fails with registry_auth_failed (credentials
 * missing or refused), unavailable (unreachable, or an error answer) or
 * cancelled.
 */
export async function pushImage(
  layout: OciLayout,
  manifestDigest: string,
  target: PushTarget,
  opts: {
    onProgress?: (p: PushProgress) => void;
    signal?: AbortSignal;
    /** The HTTP client (one that trusts the cluster CA). @default globalThis.fetch */
    send?: typeof fetch;
  } = {},
): Promise<string> {
  const client = new RegistryClient(target.endpoint, opts.send);
  const repo = target.repository;
  const scope = `repository:${repo}:push,pull`;
  const ref = `${target.endpoint.host}/${repo}:${target.tag}`;
  const manifestBytes = readFileSync(layout.blobPath(manifestDigest));
  const parsed = JSON.parse(manifestBytes.toString("utf8")) as OciManifest;
  const blobs: OciDescriptor[] = [parsed.config, ...parsed.layers];
  const progress: PushProgress = {
    ref,
    blobsDone: 0,
    blobsTotal: blobs.length,
    bytesDone: 0,
    bytesTotal: blobs.reduce((n, b) => n + b.size, 0),
    blobsSkipped: 0,
  };
  const report = () => opts.onProgress?.({ ...progress });
  await client.authorize(scope, opts.signal);
  // A rebuild of an image the registry already holds under this tag (the tag
  // is the image id) pushes nothing: one manifest HEAD instead of one request
  // per blob and a manifest PUT (docker-registry checks a bcrypt password on
  // every request, ~0.1-0.2 s each on a busy host).
  const there = await client.request(scope, {
    method: "HEAD",
    path: `/v2/${repo}/manifests/${encodeURIComponent(target.tag)}`,
    headers: { accept: parsed.mediaType ?? "application/vnd.oci.image.manifest.v1+json" },
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  await there.body?.cancel();
  if (there.ok && there.headers.get("docker-content-digest") === manifestDigest) {
    Object.assign(progress, {
      blobsDone: blobs.length,
      blobsSkipped: blobs.length,
      bytesDone: progress.bytesTotal,
    });
    report();
    return `${target.endpoint.host}/${repo}@${manifestDigest}`;
  }
  report();
  for (const blob of blobs) {
    const head = await client.request(scope, {
      method: "HEAD",
      path: `/v2/${repo}/blobs/${blob.digest}`,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (head.ok) {
      progress.blobsSkipped++;
      progress.bytesDone += blob.size;
    } else {
      await uploadBlob(
        client,
        scope,
        repo,
        layout.blobPath(blob.digest),
        blob,
        (n) => {
          progress.bytesDone += n;
          report();
        },
        opts.signal,
      );
    }
    progress.blobsDone++;
    report();
  }
  const put = await client.request(scope, {
    method: "PUT",
    path: `/v2/${repo}/manifests/${encodeURIComponent(target.tag)}`,
    headers: { "content-type": parsed.mediaType ?? "application/vnd.oci.image.manifest.v1+json" },
    body: new Uint8Array(manifestBytes),
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  if (put.status !== 201 && put.status !== 200) throw await registryAnswerError(put, `pushing ${ref}`);
  await put.body?.cancel();
  const got = put.headers.get("docker-content-digest");
  if (got && got !== manifestDigest)
    throw new BerthError(
      "internal",
      `the registry ${target.endpoint.host} stored ${ref} as ${got}, not ${manifestDigest}`,
    );
  return `${target.endpoint.host}/${repo}@${manifestDigest}`;
}

async function uploadBlob(
  client: RegistryClient,
  scope: string,
  repo: string,
  path: string,
  blob: OciDescriptor,
  onBytes: (n: number) => void,
  signal?: AbortSignal,
): Promise<void> {
  const what = `uploading ${blob.digest} to ${client.host}/${repo}`;
  const start = await client.request(scope, {
    method: "POST",
    path: `/v2/${repo}/blobs/uploads/`,
    ...(signal ? { signal } : {}),
  });
  await start.body?.cancel();
  const location = start.headers.get("location");
  if (start.status !== 202 || !location) throw await registryAnswerError(start, what);
  const url = new URL(location, `http://${client.host}`);
  url.searchParams.set("digest", blob.digest);
  // Relative Locations are resolved against the registry; an absolute one is used as given.
  const target = /^https?:\/\//.test(location) ? url.toString() : `${url.pathname}${url.search}`;
  const size = statSync(path).size;
  let pending = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      pending += chunk.length;
      if (pending >= PROGRESS_EVERY_BYTES) {
        onBytes(pending);
        pending = 0;
      }
      cb(null, chunk);
    },
  });
  const body = Readable.toWeb(createReadStream(path).pipe(counter)) as unknown as BodyInit;
  const res = await client.request(scope, {
    method: "PUT",
    path: target,
    headers: { "content-type": "application/octet-stream", "content-length": String(size) },
    body,
    duplex: "half",
    ...(signal ? { signal } : {}),
  });
  if (res.status !== 201) throw await registryAnswerError(res, what);
  await res.body?.cancel();
  if (pending > 0) onBytes(pending);
}
