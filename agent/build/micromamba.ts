// micromamba for build steps (docs/images.md, "micromamba"): the operator
// names a micromamba binary on the agent's host (`--micromamba-bin`); a step
// that runs micromamba on an image without one gets that binary as a code
// archive, mounted read-only like a Dockerfile's context, and appended to its
// PATH (so an image's own micromamba wins). The binary thus never lands in a
// layer, and its hash is part of the step's cache key (a new micromamba
// rebuilds). With neither, the build fails before any step runs.

import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { accessSync, constants, copyFileSync, createReadStream, mkdtempSync, statSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";
import { RunnerPaths } from "../../shared/tasks.ts";

const execFileP = promisify(execFile);

/** Where a micromamba step finds the configured binary. */
export const MICROMAMBA_DIR = RunnerPaths.code;

/** The shell line a micromamba step runs first: the image's micromamba, else the configured one. */
export const MICROMAMBA_PATH_LINE = `PATH="$PATH:${MICROMAMBA_DIR}"; export PATH`;

/** Probe run on the base when no binary is configured. */
export const MICROMAMBA_PROBE = "command -v micromamba";

export function micromambaMissing(baseRef: string): BerthError {
  return new BerthError(
    "failed_precondition",
    `micromamba is not in the base image ${baseRef} and this agent has no micromamba binary configured: ` +
      "use a base image that has micromamba on its PATH, or have the operator start the agents with " +
      '--micromamba-bin PATH (berth up --micromamba-bin PATH; docs/images.md, "micromamba")',
  );
}

/** Checks the operator's binary at agent start, so a wrong path fails there and not in a build. */
export function checkMicromambaBin(path: string): string {
  if (!path.startsWith("/"))
    throw new BerthError("invalid_request", `--micromamba-bin ${path} is not an absolute path`);
  try {
    if (!statSync(path).isFile()) throw new Error("not a file");
    accessSync(path, constants.X_OK);
  } catch {
    throw new BerthError("invalid_request", `--micromamba-bin ${path} is not an executable file`);
  }
  return path;
}

/**
 * The binary as a code archive (`micromamba` at its root, mode 0755):
 * its sha256 and a reader of its bytes. Made in a temp dir the caller removes.
 */
export async function micromambaArchive(bin: string): Promise<{ sha256: string; path: string; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), "berth-micromamba-"));
  try {
    const tree = join(dir, "tree");
    await execFileP("mkdir", ["-m", "0755", tree]);
    copyFileSync(bin, join(tree, "micromamba"));
    await execFileP("chmod", ["0755", join(tree, "micromamba")]);
    const path = join(dir, "micromamba.tar.gz");
    // Fixed owner, order and time, so the same binary is the same archive (and cache key).
    await execFileP("tar", [
      "--create",
      "--use-compress-program=gzip -n",
      "--file",
      path,
      "--owner=0",
      "--group=0",
      "--numeric-owner",
      "--mtime=@0",
      "--sort=name",
      "-C",
      tree,
      "micromamba",
    ]);
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
    return { sha256: hash.digest("hex"), path, dir };
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}
