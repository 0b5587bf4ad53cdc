// resolveInRoot on a plain directory tree: symlinks of every kind resolve
// inside the root, never above it.

import assert from "node:assert/strict";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { normalizeContainerPath, resolveInRoot } from "../../agent/files/index.ts";
import { tempDir } from "../helpers/env.ts";

test("container paths are normalised lexically, .. clamped at /", () => {
  assert.equal(normalizeContainerPath(""), "/");
  assert.equal(normalizeContainerPath("a/b/"), "/a/b");
  assert.equal(normalizeContainerPath("/../../etc//./passwd"), "/etc/passwd");
  assert.throws(() => normalizeContainerPath("a\0b"), { code: "path_invalid" });
});

test("symlinks resolve against the container root", (t) => {
  const dir = tempDir(t);
  const root = join(dir, "root");
  mkdirSync(join(root, "etc"), { recursive: true });
  mkdirSync(join(root, "a/b"), { recursive: true });
  writeFileSync(join(root, "etc/passwd"), "inside");
  symlinkSync("/", join(root, "a/toroot"));
  symlinkSync("/etc", join(root, "a/etc"));
  symlinkSync("../../../../..", join(root, "a/b/up"));
  symlinkSync("/etc/passwd", join(root, "a/pw"));
  symlinkSync("b/../../etc", join(root, "a/rel"));
  symlinkSync("/a/l2", join(root, "a/l1"));
  symlinkSync("/a/l1", join(root, "a/l2"));
  const res = (p: string, followFinal = true) => resolveInRoot(root, p, { followFinal });

  assert.equal(res("/a/toroot/etc/passwd").hostPath, join(root, "etc/passwd"));
  assert.equal(res("/a/etc/passwd").hostPath, join(root, "etc/passwd"));
  assert.equal(res("/a/b/up/etc/passwd").hostPath, join(root, "etc/passwd"));
  assert.equal(res("/a/pw").containerPath, "/etc/passwd");
  assert.equal(res("/a/rel/passwd").containerPath, "/etc/passwd");
  assert.equal(res("/a/toroot/..").containerPath, "/");
  // The final link itself, when asked not to follow it.
  const link = res("/a/pw", false);
  assert.equal(link.containerPath, "/a/pw");
  assert.ok(link.stat?.isSymbolicLink());
  // Missing components stay inside too, and say where the path stops existing.
  const missing = res("/a/etc/new/deeper");
  assert.equal(missing.hostPath, join(root, "etc/new/deeper"));
  assert.equal(missing.stat, undefined);
  assert.equal(missing.missingFrom, "/etc/new");
  assert.throws(() => res("/a/l1/x"), { code: "path_invalid", message: /too many levels/ });
  assert.throws(() => res("/etc/passwd/x"), { code: "path_invalid" });
});
