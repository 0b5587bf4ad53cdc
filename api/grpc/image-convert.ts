// Wire forms of ImportImage and GcImages (the other image messages are in
// container-convert.ts).

import { BerthError } from "../../shared/errors.ts";
import {
  IMAGE_IMPORT_KINDS,
  type ImageGcResult,
  type ImageImportKind,
  type ImportImageRequest,
  isImageImportKind,
} from "../containers.ts";

export interface WireImportImageRequest {
  path: string;
  name: string;
  kind: string;
}

export interface WireGcImagesRequest {
  unusedForMs?: number;
}

export interface WireGcImagesResponse {
  removedImages: string[];
  freedBytes: number;
}

const KIND_TO_WIRE: Record<ImageImportKind, string> = {
  auto: "IMAGE_IMPORT_KIND_AUTO",
  "oci-archive": "IMAGE_IMPORT_KIND_OCI_ARCHIVE",
  "docker-archive": "IMAGE_IMPORT_KIND_DOCKER_ARCHIVE",
  rootfs: "IMAGE_IMPORT_KIND_ROOTFS",
};
const KIND_FROM_WIRE = new Map(Object.entries(KIND_TO_WIRE).map(([k, w]) => [w, k as ImageImportKind]));


function safeUint(n: number, field: string, code: "invalid_request" | "internal"): number {
  if (!Number.isSafeInteger(n) || n < 0)
    throw new BerthError(code, `${field} must be a whole number, 0 or more, got ${n}`);
  return n;
}

export function importRequestToProto(r: ImportImageRequest): WireImportImageRequest {
  const kind = r.kind ?? "auto";
  if (!isImageImportKind(kind)) {
    throw new BerthError(
      "invalid_request",
      `import kind ${kind} is not one of ${IMAGE_IMPORT_KINDS.join(", ")}`,
    );
  }
  return { path: r.path, name: r.name, kind: KIND_TO_WIRE[kind] };
}

export function importRequestFromProto(w: WireImportImageRequest): ImportImageRequest {
  const kind = KIND_FROM_WIRE.get(w.kind);
  if (!kind) throw new BerthError("invalid_request", `malformed request: import kind ${w.kind}`);
  return { path: w.path, name: w.name, kind };
}

export function gcRequestToProto(opts: { unusedForMs?: number } | undefined): WireGcImagesRequest {
  if (opts?.unusedForMs === undefined) return {};
  return { unusedForMs: safeUint(opts.unusedForMs, "unusedForMs", "invalid_request") };
}

export function gcRequestFromProto(w: WireGcImagesRequest): { unusedForMs?: number } {
  return w.unusedForMs === undefined || w.unusedForMs === null ? {} : { unusedForMs: w.unusedForMs };
}

export function gcResultToProto(r: ImageGcResult): WireGcImagesResponse {
  return {
    removedImages: [...r.removedImages],
    freedBytes: safeUint(r.freedBytes, "freedBytes", "internal"),
  };
}

export function gcResultFromProto(w: WireGcImagesResponse): ImageGcResult {
  return { removedImages: [...w.removedImages], freedBytes: w.freedBytes };
}
