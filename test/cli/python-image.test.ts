import assert from "node:assert/strict";
import { lstatSync, mkdirSync, mkdtempSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { addPythonAlias } from "../../cli/up/python-image.ts";

function rootfs(t: { after: (fn: () => void) => void }, withPython3: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), "berth-pyalias-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, "usr/bin"), { recursive: true });
  if (withPython3) writeFileSync(join(dir, "usr/bin/python3"), "#!/bin/sh\n", { mode: 0o755 });
  return dir;
}

test("the default image gets `python` as a link to python3, once", (t) => {
  const dir = rootfs(t, true);
  addPythonAlias(dir);
  assert.equal(readlinkSync(join(dir, "usr/bin/python")), "python3");
  addPythonAlias(dir); // a second run (a cached rootfs) changes nothing and does not throw
  assert.equal(readlinkSync(join(dir, "usr/bin/python")), "python3");
});

test("a rootfs with its own `python` keeps it; one without python3 gets no dangling link", (t) => {
  const own = rootfs(t, true);
  writeFileSync(join(own, "usr/bin/python"), "mine");
  addPythonAlias(own);
  assert.ok(lstatSync(join(own, "usr/bin/python")).isFile());
  const bare = rootfs(t, false);
  addPythonAlias(bare);
  assert.throws(() => lstatSync(join(bare, "usr/bin/python")), /ENOENT/);
});
