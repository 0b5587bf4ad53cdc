// ContainerHost's image operations: a pull with the API's credentials, the
// air-gap import and image GC. Each checks the request, picks how to read the
// path, and hands the work to the image store (which holds the in-use marks,
// so gc never removes an image a container uses).

import { existsSync, statSync } from "node:fs";
import { isAbsolute } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { CommandRunner, GcOptions, GcResult, ImageInfo, PullProgress } from "../images/index.ts";
import type { HostImages } from "./options.ts";
import type { ImageGcResult, ImageImportKind, ImageSummary, ImportImageRequest } from "../../api/index.ts";

/** What import and gc need from the image store; agent/images' ImageStore has it. */
export interface ImageOpsStore {
  importArchive(path: string, opts: { name: string }): Promise<ImageInfo>;
  importRootfs(source: string, opts: { name: string }): Promise<ImageInfo>;
  gc(opts?: GcOptions): Promise<GcResult>;
  readonly options: { runner: CommandRunner; tar: string; transferTimeoutMs: number };
}

export function imageSummary(i: ImageInfo): ImageSummary {
  return {
    ref: i.ref,
    refs: [...i.refs],
    digest: i.digest,
    sizeBytes: i.sizeBytes,
    pulledAt: i.pulledAt,
    inUse: i.inUseBy.length > 0,
  };
}

export interface PullImageOptions {
  credentials?: { username: string; password: string };
  onProgress?: (p: PullProgress) => void;
}

/** Pulls `ref` into the image store, the API's basic credentials passed on as a generic registry login. */
export async function pullImage(
  images: Pick<HostImages, "pull">,
  ref: string,
  opts: PullImageOptions = {},
): Promise<ImageSummary> {
  const c = opts.credentials;
  const info = await images.pull(ref, {
    ...(c
      ? { credentials: { kind: "basic", source: "generic", username: c.username, password: c.password } }
      : {}),
    ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
  });
  return imageSummary(info);
}

const KINDS: readonly ImageImportKind[] = ["auto", "oci-archive", "docker-archive", "rootfs"];

const invalid = (message: string, details?: Record<string, unknown>) =>
  new BerthError("invalid_request", message, details);

/** The store behind a ContainerHost, when it can import and gc (the real ImageStore can). */
export function imageOpsStore(images: object): ImageOpsStore {
  const s = images as Partial<ImageOpsStore>;
  if (
    typeof s.importArchive !== "function" ||
    typeof s.importRootfs !== "function" ||
    typeof s.gc !== "function" ||
    !s.options
  ) {
    throw new BerthError(
      "not_implemented",
      "this agent's image store cannot import images or collect garbage",
    );
  }
  return s as ImageOpsStore;
}

/**
 * What a file is, from its tar listing: an OCI archive (oci-layout +
 * index.json), a `docker save` archive (manifest.json), else a plain rootfs
 * tarball. A file tar cannot list is refused.
 */
export async function detectImportKind(
  store: ImageOpsStore,
  path: string,
): Promise<"oci-archive" | "docker-archive" | "rootfs"> {
  if (statSync(path).isDirectory()) return "rootfs";
  const o = store.options;
  let listing: string;
  try {
    listing = (await o.runner.run(o.tar, ["-tf", path], { timeoutMs: o.transferTimeoutMs })).stdout;
  } catch (e) {
    const why = e instanceof Error ? e.message.slice(0, 500) : String(e);
    throw invalid(`${path} is neither a directory nor a readable tar archive: ${why}`, { path });
  }
  const names = new Set(listing.split("\n").map((n) => n.trim().replace(/^\.\//, "")));
  if (names.has("oci-layout") && names.has("index.json")) return "oci-archive";
  if (names.has("manifest.json")) return "docker-archive";
  return "rootfs";
}

function checkImportRequest(req: ImportImageRequest): ImageImportKind {
  const kind = req.kind ?? "auto";
  if (!KINDS.includes(kind)) throw invalid(`import kind ${kind} is not one of ${KINDS.join(", ")}`);
  if (typeof req.name !== "string" || req.name.trim() === "") {
    throw invalid("import needs a name for the image, e.g. python:3.12");
  }
  if (typeof req.path !== "string" || req.path === "") throw invalid("import needs the path of the image");
  if (!isAbsolute(req.path)) {
    throw invalid(`import path ${req.path} is relative; give an absolute path on the agent's host`, {
      path: req.path,
    });
  }
  if (!existsSync(req.path)) {
    throw invalid(`import path ${req.path} does not exist on the agent's host`, { path: req.path });
  }
  return kind;
}

/** Imports `req.path` as `req.name`; see ImportImageRequest. */
export async function importImage(store: ImageOpsStore, req: ImportImageRequest): Promise<ImageInfo> {
  const kind = checkImportRequest(req);
  const opts = { name: req.name };
  if (kind === "rootfs") return store.importRootfs(req.path, opts);
  if (statSync(req.path).isDirectory()) {
    if (kind === "auto") return store.importRootfs(req.path, opts);
    throw invalid(`import path ${req.path} is a directory, not an ${kind} file; use kind rootfs`, {
      path: req.path,
    });
  }
  const detected = await detectImportKind(store, req.path);
  if (kind === "auto") {
    return detected === "rootfs" ? store.importRootfs(req.path, opts) : store.importArchive(req.path, opts);
  }
  if (detected !== kind) {
    const what = detected === "rootfs" ? "a plain tarball (a rootfs)" : `a ${detected}`;
    throw invalid(`${req.path} is ${what}, not a ${kind}`, { path: req.path });
  }
  return store.importArchive(req.path, opts);
}

/** Runs the store's gc; images in use (marked by the host) and the default image stay. */
export async function gcImages(
  store: ImageOpsStore,
  opts: { unusedForMs?: number } = {},
): Promise<ImageGcResult> {
  const u = opts.unusedForMs;
  if (u !== undefined && (!Number.isFinite(u) || u < 0)) {
    throw invalid(`gc unusedForMs must be a non-negative number of milliseconds, got ${u}`);
  }
  const r = await store.gc(u === undefined ? {} : { unusedForMs: u });
  return { removedImages: [...r.removedImages], freedBytes: r.freedBytes };
}
