import { existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { BerthError, invalid } from "../../shared/errors.ts";
import { CommandFailedError, skopeoMessage } from "./commands.ts";
import type { ResolvedImageStoreOptions } from "./options.ts";

export type ArchiveFormat = "oci-archive" | "docker-archive";

const DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

function toolError(e: unknown, what: string): BerthError {
  if (e instanceof BerthError) return e;
  if (e instanceof CommandFailedError) {
    const why = e.reason === "exit" ? skopeoMessage(e.stderr) || `exit ${e.exitCode}` : e.reason;
    const code = e.reason === "spawn" ? "unavailable" : "invalid_request";
    return new BerthError(code, `${what}: ${why}`);
  }
  return new BerthError("internal", `${what}: ${e instanceof Error ? e.message : String(e)}`);
}

/**
 * Tells an OCI archive (has `oci-layout` and `index.json`) from a
 * `docker save` archive (has `manifest.json`) by listing the tar.
 */
export async function detectArchiveFormat(
  o: ResolvedImageStoreOptions,
  path: string,
): Promise<ArchiveFormat> {
  if (!existsSync(path) || !statSync(path).isFile())
    throw invalid(`image archive ${path} does not exist or is not a file`);
  let listing: string;
  try {
    listing = (await o.runner.run(o.tar, ["-tf", path], { timeoutMs: o.transferTimeoutMs })).stdout;
  } catch (e) {
    throw toolError(e, `${path} is not a readable tar archive`);
  }
  const names = new Set(listing.split("\n").map((n) => n.trim().replace(/^\.\//, "")));
  if (names.has("oci-layout") && names.has("index.json")) return "oci-archive";
  if (names.has("manifest.json")) return "docker-archive";
  throw invalid(
    `${path} is neither an OCI archive (oci-layout + index.json) nor a docker archive (manifest.json); ` +
      "use importRootfs for a plain filesystem tarball",
  );
}

/** Copies the one image in an archive into `layoutDir`, its blobs into the shared blob dir. */
export async function copyArchive(
  o: ResolvedImageStoreOptions,
  path: string,
  format: ArchiveFormat,
  dest: { layoutDir: string; tag: string; sharedBlobDir: string },
): Promise<void> {
  const args = ["copy", "--quiet", "--dest-shared-blob-dir", dest.sharedBlobDir];
  args.push(`${format}:${path}`, `oci:${dest.layoutDir}:${dest.tag}`);
  try {
    await o.runner.run(o.skopeo, args, { timeoutMs: o.transferTimeoutMs });
  } catch (e) {
    throw toolError(e, `importing ${format} ${path} failed`);
  }
}

/**
 * Makes a one-layer image in a new layout at `<work>/layout` from a rootfs
 * directory or tarball (tarballs are unpacked to `<work>/src` first, owners
 * kept). Returns the layout directory.
 */
export async function buildLayoutFromRootfs(
  o: ResolvedImageStoreOptions,
  source: string,
  work: string,
  tag: string,
): Promise<string> {
  if (!existsSync(source)) throw invalid(`rootfs ${source} does not exist`);
  let dir = source;
  if (!statSync(source).isDirectory()) {
    dir = join(work, "src");
    mkdirSync(dir);
    try {
      await o.runner.run(o.tar, ["-xpf", source, "--numeric-owner", "-C", dir], {
        timeoutMs: o.transferTimeoutMs,
      });
    } catch (e) {
      throw toolError(e, `rootfs ${source} is neither a directory nor a readable tar archive`);
    }
  }
  const layout = join(work, "layout");
  const image = `${layout}:${tag}`;
  const rootless = o.rootless ? ["--rootless"] : [];
  const steps: string[][] = [
    ["init", "--layout", layout],
    ["new", "--image", image],
    ["insert", ...rootless, "--image", image, dir, "/"],
    ["config", "--image", image, "--config.env", DEFAULT_PATH, "--config.workingdir", "/"],
    ["gc", "--layout", layout],
  ];
  for (const args of steps) {
    try {
      await o.runner.run(o.umoci, args, { timeoutMs: o.transferTimeoutMs });
    } catch (e) {
      throw toolError(e, `building an image from rootfs ${source} failed (umoci ${args[0]})`);
    }
  }
  return layout;
}
