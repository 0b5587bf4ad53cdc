// The backup archive: a tar of a staging directory with manifest.json at its
// root listing every file with its size and SHA-256.

import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, readdirSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";

const run = promisify(execFile);

export const MANIFEST = "manifest.json";
export const FORMAT = "berth-backup";
export const FORMAT_VERSION = 1;

export interface ManifestFile {
  path: string;
  size: number;
  sha256: string;
}

export interface Manifest {
  format: typeof FORMAT;
  version: number;
  created_at: string;
  berth_version: string;
  /** Which store the archive holds (store/berth.db or store/berth.pgdump). */
  store_engine: "sqlite" | "postgres";
  /** The store's last applied migration. */
  schema_version: string;
  /** Fingerprint of the secrets key (keyFingerprint), when the backup holds it. */
  secrets_key_id?: string;
  files: ManifestFile[];
}

async function sha256(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/** Every regular file under `root`, as archive paths (always '/'-separated), sorted. */
export function listFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out.push(relative(root, p).split(sep).join("/"));
      else
        throw new BerthError(
          "failed_precondition",
          `${p} is neither a file nor a directory; a backup holds only those`,
        );
    }
  };
  walk(root);
  return out.sort();
}

export async function describeFiles(root: string, paths: string[]): Promise<ManifestFile[]> {
  const files: ManifestFile[] = [];
  for (const path of paths) {
    const full = join(root, path);
    files.push({ path, size: statSync(full).size, sha256: await sha256(full) });
  }
  return files;
}

export async function tarCreate(archive: string, root: string): Promise<void> {
  await tar(["-cf", archive, "-C", root, "."]);
}

export async function tarExtract(archive: string, root: string): Promise<void> {
  await tar(["-xf", archive, "-C", root, "--no-same-owner"]);
}

async function tar(args: string[]): Promise<void> {
  try {
    await run("tar", args, { maxBuffer: 16 * 2 ** 20 });
  } catch (e) {
    const err = e as { code?: string; stderr?: string; message: string };
    if (err.code === "ENOENT")
      throw new BerthError("failed_precondition", "tar is not installed: apt-get install tar");
    throw new BerthError("internal", `tar ${args[0]} failed: ${(err.stderr || err.message).trim()}`);
  }
}

/** Checks an extracted archive against its manifest: the same files, sizes and checksums, nothing more. */
export async function verifyExtracted(root: string): Promise<Manifest> {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(
      await import("node:fs/promises").then((f) => f.readFile(join(root, MANIFEST), "utf8")),
    );
  } catch {
    throw new BerthError("invalid_request", `not a berth backup: it has no readable ${MANIFEST}`);
  }
  if (manifest.format !== FORMAT || !Array.isArray(manifest.files))
    throw new BerthError("invalid_request", `not a berth backup: ${MANIFEST} is not a ${FORMAT} manifest`);
  if (manifest.version !== FORMAT_VERSION)
    throw new BerthError(
      "invalid_request",
      `backup format version ${manifest.version}; this berth reads version ${FORMAT_VERSION}`,
    );
  const present = listFiles(root).filter((p) => p !== MANIFEST);
  const listed = manifest.files.map((f) => f.path).sort();
  const extra = present.filter((p) => !listed.includes(p));
  const missing = listed.filter((p) => !present.includes(p));
  if (extra.length > 0 || missing.length > 0)
    throw new BerthError(
      "invalid_request",
      `the backup does not match its manifest: ${[...missing.map((p) => `missing ${p}`), ...extra.map((p) => `unlisted ${p}`)].slice(0, 5).join(", ")}`,
    );
  for (const f of manifest.files) {
    const [actual] = await describeFiles(root, [f.path]);
    if (actual!.size !== f.size || actual!.sha256 !== f.sha256)
      throw new BerthError("invalid_request", `the backup is damaged: ${f.path} does not match its checksum`);
  }
  return manifest;
}
