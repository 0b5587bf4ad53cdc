import { execFile } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { addPythonAlias } from "../../cli/up/python-image.ts";
import { buildOnce } from "./build-once.ts";

const run = promisify(execFile);

/** Where cached test artefacts live; survives fresh clones on the same machine. */
export const TEST_CACHE = process.env.BERTH_TEST_CACHE ?? "/var/cache/berth-test";

const SUITE = "bookworm";
const NAME = `rootfs-${SUITE}-python3`;

/**
 * A minimal Debian rootfs with python3 (and `python`, as the default image of
 * `berth up` has it), made once with debootstrap (its default mirror) and cached. Safe to call from several test processes at once: one
 * builds, the others wait for it.
 */
export async function testRootfs(): Promise<string> {
  const final = join(TEST_CACHE, NAME);
  const ready = () => existsSync(join(final, "usr/bin/python3"));
  mkdirSync(TEST_CACHE, { recursive: true });
  await buildOnce(join(TEST_CACHE, `${NAME}.lock`), ready, async () => {
    const tmp = join(TEST_CACHE, `${NAME}.tmp-${process.pid}`);
    rmSync(tmp, { recursive: true, force: true });
    try {
      await run("debootstrap", ["--variant=minbase", "--include=python3", SUITE, tmp], {
        maxBuffer: 64 * 1024 * 1024,
      });
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      const err = e as { stderr?: string; message: string };
      throw new Error(`debootstrap of the test rootfs failed: ${(err.stderr ?? err.message).slice(-2000)}`);
    }
    // Shrink: apt lists and caches are not needed in a test image.
    for (const p of ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"]) {
      rmSync(join(tmp, p), { recursive: true, force: true });
    }
    rmSync(final, { recursive: true, force: true });
    renameSync(tmp, final);
  });
  // Also on a rootfs cached before the alias existed.
  addPythonAlias(final);
  return final;
}
