// The python3 helper that makes idmapped mounts (agent/runtime/idmap-helper.ts):
// one process serves a runtime's requests in turn, a request that fails
// names its cause and leaves the helper serving, and a closed helper refuses.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ID_MAP_SIZE, pickIdMap } from "../../agent/runtime/idmap.ts";
import { IdmapHelper } from "../../agent/runtime/idmap-helper.ts";
import { needs } from "../helpers/env.ts";
import { unmountLeftovers } from "../helpers/mounts.ts";

test("one helper makes mounts in turn; a failure names its cause and the next request works", async (t) => {
  if (!needs(t, { root: true, commands: ["python3", "umount"] })) return;
  const dir = mkdtempSync(join(tmpdir(), "berth-idmap-"));
  const helper = new IdmapHelper();
  t.after(() => {
    helper.close();
    unmountLeftovers([dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  const source = join(dir, "source");
  mkdirSync(source);
  writeFileSync(join(source, "file"), "x");
  const map = pickIdMap([]);
  // Concurrent callers: served one after the other by the one process.
  await Promise.all(
    ["a", "b", "c"].map((name) =>
      helper.mount(map, [{ source, target: join(dir, name), readonly: name === "b" }]),
    ),
  );
  for (const name of ["a", "b", "c"]) {
    // On disk the file is root's; through the mount the host sees the range's root.
    assert.equal(statSync(join(dir, name, "file")).uid, map.hostId, name);
  }
  assert.equal(statSync(join(source, "file")).uid, 0);
  assert.throws(() => writeFileSync(join(dir, "b", "other"), "y"), /EROFS/);

  await assert.rejects(
    helper.mount(map, [{ source: join(dir, "missing"), target: join(dir, "d"), readonly: true }]),
    (e: Error & { code?: string }) => {
      assert.equal(e.code, "internal");
      assert.match(e.message, /open_tree .*missing: No such file or directory/);
      assert.match(e.message, /--user-namespace off/, "it says how to opt out");
      return true;
    },
  );
  const other = { hostId: map.hostId + ID_MAP_SIZE, size: ID_MAP_SIZE };
  await helper.mount(
    other,
    [{ source, target: join(dir, "e"), readonly: true }],
    [
      {
        target: join(dir, "tmp"),
        flags: 2 | 4,
        data: `size=1m,mode=1777,uid=${other.hostId},gid=${other.hostId}`,
      },
    ],
  );
  assert.equal(statSync(join(dir, "e", "file")).uid, other.hostId);
  assert.equal(statSync(join(dir, "tmp")).uid, other.hostId, "the tmpfs is owned by the range's root");

  helper.close();
  await assert.rejects(
    helper.mount(map, [{ source, target: join(dir, "f"), readonly: true }]),
    /this runtime was closed/,
  );
});
