// The agent's volume mounts: directories under the volume root per
// workspace, made on first use, at /volumes/<name> and the mount path
// resolved against the working directory; mountpoints under the read-only
// code tree made on the host side; bad names and paths refused.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { checkVolumeMounts, volumeBindMounts, volumeDestination } from "../../agent/volumes/volumes.ts";
import { checkStubVolumes } from "../../shared/volumes.ts";

const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "berth-vol-"));
  return { d, done: () => rmSync(d, { recursive: true, force: true }) };
};

test("a volume is <root>/<workspace>/<name>, made on first use and mounted at /volumes/<name> and its mount path", (t) => {
  const { d, done } = tmp();
  t.after(done);
  const mounts = volumeBindMounts(
    [
      { workspaceId: "ws-a", name: "weights", mountPath: "./weights" },
      { workspaceId: "ws-a", name: "cache", mountPath: "/data/cache" },
    ],
    d,
    "/srv/app",
  );
  assert.deepEqual(mounts, [
    { source: join(d, "ws-a", "weights"), destination: "/volumes/weights", readonly: false, idmapped: true },
    { source: join(d, "ws-a", "weights"), destination: "/srv/app/weights", readonly: false, idmapped: true },
    { source: join(d, "ws-a", "cache"), destination: "/volumes/cache", readonly: false, idmapped: true },
    { source: join(d, "ws-a", "cache"), destination: "/data/cache", readonly: false, idmapped: true },
  ]);
  assert.ok(statSync(join(d, "ws-a", "weights")).isDirectory());
  // Another workspace's volume of the same name is another directory.
  const other = volumeBindMounts([{ workspaceId: "ws-b", name: "weights", mountPath: "w" }], d, "/");
  assert.equal(other[0]!.source, join(d, "ws-b", "weights"));
  assert.equal(other[1]!.destination, "/w");
});

test("a mount path under the read-only code tree gets its mountpoint made in the code directory", (t) => {
  const { d, done } = tmp();
  t.after(done);
  const code = join(d, "code");
  mkdirSync(code);
  volumeBindMounts(
    [{ workspaceId: "ws-a", name: "v", mountPath: "./deep/v" }],
    join(d, "vols"),
    "/mnt/code",
    [{ destination: "/mnt/code", source: code }],
  );
  assert.ok(statSync(join(code, "deep", "v")).isDirectory());
  writeFileSync(join(code, "file"), "x");
  assert.throws(
    () =>
      volumeBindMounts(
        [{ workspaceId: "ws-a", name: "v", mountPath: "file" }],
        join(d, "vols"),
        "/mnt/code",
        [{ destination: "/mnt/code", source: code }],
      ),
    /volume v: cannot make its mountpoint \/mnt\/code\/file/,
  );
});

test("without a volume root a request with volumes fails naming the volume", () => {
  assert.throws(
    () => volumeBindMounts([{ workspaceId: "ws-a", name: "v", mountPath: "v" }], undefined, "/"),
    /no volume root configured, so volume v cannot be mounted/,
  );
  assert.deepEqual(volumeBindMounts([], undefined, "/"), []);
});

test("names, workspace ids and mount paths are checked; destinations normalised", () => {
  assert.throws(
    () => checkVolumeMounts([{ workspaceId: "ws-a", name: "../x", mountPath: "v" }]),
    /volume volumes\[0\]\.name/,
  );
  assert.throws(
    () => checkVolumeMounts([{ workspaceId: "../ws", name: "x", mountPath: "v" }]),
    /workspace id/,
  );
  assert.throws(
    () => checkVolumeMounts([{ workspaceId: "ws-a", name: "x", mountPath: "a/../../etc" }]),
    /may not contain '\.\.'/,
  );
  assert.throws(
    () => checkVolumeMounts([{ workspaceId: "ws-a", name: "x", mountPath: "/volumes/y" }]),
    /under \/volumes/,
  );
  assert.throws(
    () =>
      checkVolumeMounts([
        { workspaceId: "ws-a", name: "x", mountPath: "a" },
        { workspaceId: "ws-a", name: "x", mountPath: "b" },
      ]),
    /listed twice/,
  );
  assert.throws(() => checkVolumeMounts("x"), /volumes must be a list/);
  assert.deepEqual(checkVolumeMounts(undefined), []);
  assert.equal(volumeDestination("./a/./b/", "/mnt/code"), "/mnt/code/a/b");
  assert.equal(volumeDestination("/abs", "/mnt/code"), "/abs");
  assert.deepEqual(checkStubVolumes([{ name: "w", mount_path: "./w" }]), [{ name: "w", mount_path: "./w" }]);
  assert.throws(() => checkStubVolumes([{ name: "w" }]), /volumes\[0\]\.mount_path/);
});
