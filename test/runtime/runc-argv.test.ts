// The waiter's argv (`runc run --keep`, or `runc restore` from a checkpoint)
// and the checks on a restore's image dir. Runs without root: nothing is
// started. The real restore needs `criu check` to pass (test/snapshots).

import assert from "node:assert/strict";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Runc, restoreImages } from "../../agent/runtime/runc.ts";
import { BerthError } from "../../shared/errors.ts";
import { tempDir } from "../helpers/env.ts";

const files = {
  bundle: "/var/lib/berth/containers/ctr-1",
  id: "ctr-1",
  pidFile: "/var/lib/berth/containers/ctr-1/init.pid",
  exitFile: "/var/lib/berth/containers/ctr-1/exit-status",
  logFile: "/var/lib/berth/containers/ctr-1/runc.log",
};

/** The runc command the waiter's sh runs: everything after the script's own arguments. */
function runcArgv(argv: string[]): string[] {
  assert.equal(argv[0], "-c");
  assert.equal(argv[2], "berth-waiter");
  assert.equal(argv[3], files.exitFile);
  return argv.slice(4);
}

const common = ["--root", "/run/berth-runc", "--log", files.logFile, "--log-format", "json"];
const tail = ["--bundle", files.bundle, "--pid-file", files.pidFile, "ctr-1"];

test("the waiter runs `runc run --keep` in the foreground", () => {
  const runc = new Runc("/usr/sbin/runc", "/run/berth-runc");
  assert.deepEqual(runcArgv(runc.waiterArgv(files)), ["/usr/sbin/runc", ...common, "run", "--keep", ...tail]);
});

test("with restore, the waiter runs `runc restore` from the images, in the foreground", () => {
  const runc = new Runc("/usr/sbin/runc", "/run/berth-runc");
  const argv = runcArgv(
    runc.waiterArgv({ ...files, restore: { imagePath: "/snap/checkpoint", workPath: "/b/criu-work" } }),
  );
  assert.deepEqual(argv, [
    "/usr/sbin/runc",
    ...common,
    "restore",
    "--image-path",
    "/snap/checkpoint",
    "--work-path",
    "/b/criu-work",
    ...tail,
  ]);
  // runc waits for the restored container (its exit status is the waiter's), as with run.
  assert.ok(!argv.includes("--detach") && !argv.includes("-d"));
  assert.ok(!argv.includes("--keep"), "runc restore has no --keep");
});

test("restoreImages: the checkpoint dir must be there; CRIU's work dir goes in the bundle", (t) => {
  const dir = tempDir(t);
  const bundle = join(dir, "bundle");
  const checkpoint = join(dir, "checkpoint");
  mkdirSync(bundle);
  mkdirSync(checkpoint);
  const r = restoreImages(checkpoint, bundle);
  assert.deepEqual(r, { imagePath: checkpoint, workPath: join(bundle, "criu-work") });
  assert.ok(statSync(r.workPath).isDirectory());
  // Made already: a second call is fine.
  assert.deepEqual(restoreImages(checkpoint, bundle), r);

  const refused = (code: string, re: RegExp) => (e: unknown) =>
    e instanceof BerthError && e.code === code && re.test(e.message) && e.details?.field === "restoreFrom";
  assert.throws(() => restoreImages("snap/checkpoint", bundle), refused("invalid_request", /absolute path/));
  assert.throws(
    () => restoreImages(join(dir, "none"), bundle),
    refused("failed_precondition", /none is not a directory/),
  );
  const file = join(dir, "file");
  writeFileSync(file, "");
  assert.throws(
    () => restoreImages(file, bundle),
    refused("failed_precondition", /not a directory of CRIU images/),
  );
});
