// Flags and output of `berth agent import` and `berth agent gc`.

import { resolve } from "node:path";
import type {
  ImageGcResult,
  ImageImportKind,
  ImageSummary,
  ImportImageRequest,
} from "../../api/index.ts";
import { IMAGE_IMPORT_KINDS, isImageImportKind } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { formatBytes } from "../output.ts";

const invalid = (message: string) => new BerthError("invalid_request", message);

/**
 * The import request for `berth agent import PATH --name REF [--kind K]`.
 * The agent runs on this host, so a relative PATH is taken from the working
 * directory (the agent itself only accepts absolute paths).
 */
export function importRequestFromFlags(
  path: string,
  o: { name: string; kind?: string },
  cwd = process.cwd(),
): ImportImageRequest {
  if (path.trim() === "") throw invalid("import needs the path of an archive, a tarball or a directory");
  if (o.name.trim() === "") throw invalid("--name must be an image reference, e.g. myapp:1.0");
  const kind = o.kind ?? "auto";
  if (!isImageImportKind(kind)) {
    throw invalid(`--kind ${JSON.stringify(kind)} must be one of ${IMAGE_IMPORT_KINDS.join(", ")}`);
  }
  return { path: resolve(cwd, path), name: o.name, kind: kind as ImageImportKind };
}

/** `--unused-hours`: hours, fractions allowed, 0 or more, as milliseconds. */
export function parseUnusedHours(text: string): number {
  const h = Number(text);
  if (text.trim() === "" || !Number.isFinite(h) || h < 0) {
    throw invalid(`--unused-hours ${JSON.stringify(text)} must be a number of hours, 0 or more`);
  }
  return Math.round(h * 3_600_000);
}

/** One line per removed image (with the references it had, from `before`), then the total. */
export function gcLines(r: ImageGcResult, before: ImageSummary[]): string[] {
  const refs = new Map(before.map((i) => [i.digest, i.refs]));
  const lines = r.removedImages.map((d) => {
    const names = refs.get(d) ?? [];
    return names.length > 0 ? `removed ${d} (${names.join(", ")})` : `removed ${d}`;
  });
  const n = r.removedImages.length;
  lines.push(`${n} image${n === 1 ? "" : "s"} removed, ${formatBytes(r.freedBytes)} freed`);
  return lines;
}
