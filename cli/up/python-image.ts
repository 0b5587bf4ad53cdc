// The image `berth up` gives functions that name none. The spec's default is
// an Ubuntu base from Docker Hub, which many on-prem and air-gapped hosts
// cannot reach; a single-machine cluster instead builds a Debian rootfs with
// python3 once (debootstrap, from the machine's usual mirror), imports it into
// its agent and makes it the agent's default image. `--default-image REF`
// skips all of this.

import { execFile } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { BerthError, describeError } from "../../shared/errors.ts";

const run = promisify(execFile);

/**
 * The reference the built image is known by on the agent. The tag changes
 * whenever what the image holds changes (v2: `python` beside `python3`), so an
 * agent that imported an older build imports this one instead of reusing it.
 */
export const UP_PYTHON_IMAGE = "berth.local/python:bookworm-v2";
const SUITE = "bookworm";

/**
 * `python` as well as `python3` (a symlink /usr/bin/python → python3), as
 * programs written for other platforms run `python …` (Debian ships only
 * python3 without python-is-python3). A rootfs that already has a `python`
 * keeps it. Idempotent; safe when several processes do it at once.
 */
export function addPythonAlias(rootfs: string): void {
  const link = join(rootfs, "usr/bin/python");
  if (!existsSync(join(rootfs, "usr/bin/python3"))) return;
  try {
    lstatSync(link);
    return; // a file, a link (even a dangling one): the rootfs's own choice
  } catch {}
  try {
    symlinkSync("python3", link);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
}

/** A rootfs with python3 (and cloudpickle) under dir, made with debootstrap the first time; `python` added. */
export async function ensurePythonRootfs(dir: string, print: (line: string) => void): Promise<string> {
  if (existsSync(join(dir, "usr/bin/python3"))) {
    addPythonAlias(dir);
    return dir;
  }
  mkdirSync(dirname(dir), { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  print(
    `berth up: building the default Python image with debootstrap (first start only, a few minutes) in ${dir}`,
  );
  try {
    await run("debootstrap", ["--variant=minbase", "--include=python3,python3-cloudpickle", SUITE, tmp], {
      maxBuffer: 64 * 1024 * 1024,
    });
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    const err = e as { stderr?: string; message: string };
    throw new BerthError(
      "unavailable",
      `debootstrap of the default Python image failed (use --default-image REF to name an image instead): ${(err.stderr ?? err.message).trim().slice(-1000)}`,
    );
  }
  for (const p of ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"]) {
    rmSync(join(tmp, p), { recursive: true, force: true });
  }
  addPythonAlias(tmp);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return dir;
}

/** Imports the rootfs into the agent behind socketPath unless it already has the image. */
export async function importPythonImage(
  socketPath: string,
  rootfs: string,
  print: (line: string) => void,
): Promise<void> {
  // Loaded here, not at the top: the gRPC client is heavy and `berth --help` never needs it.
  const { AgentRpcClient } = await import("../../api/grpc/index.ts");
  const client = new AgentRpcClient({ address: `unix://${socketPath}` });
  try {
    const images = await client.listImages();
    if (images.some((i) => i.refs.includes(UP_PYTHON_IMAGE) || i.ref === UP_PYTHON_IMAGE)) return;
    print(`berth up: importing ${rootfs} into the agent as ${UP_PYTHON_IMAGE}`);
    await client.importImage({ path: rootfs, name: UP_PYTHON_IMAGE, kind: "rootfs" });
  } catch (e) {
    throw new BerthError(
      "unavailable",
      `cannot import the default Python image into the agent: ${describeError(e)}`,
    );
  } finally {
    client.close();
  }
}
