// readHostId: the machine id when a file holds one, else an id kept in the
// data dir. Real files in a temp dir stand in for /etc/machine-id.

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import { HOST_ID_FILE, hashMachineId, readHostId } from "../../shared/host-id.ts";

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "berth-host-id-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("the first machine-id file holding an id wins, trimmed and hashed; the data dir is left alone", (t) => {
  const dir = tempDir(t);
  const empty = join(dir, "empty-machine-id");
  const unset = join(dir, "uninitialized-machine-id");
  const real = join(dir, "machine-id");
  writeFileSync(empty, "\n");
  writeFileSync(unset, "uninitialized\n");
  writeFileSync(real, "  3d1219c7c4c5404aaa1f6d2a48adfda4\n");
  const dataDir = join(dir, "data");
  const id = readHostId(dataDir, [join(dir, "missing"), empty, unset, real]);
  assert.equal(id, hashMachineId("3d1219c7c4c5404aaa1f6d2a48adfda4"));
  assert.match(id, /^[0-9a-f]{32}$/);
  assert.notEqual(id, "3d1219c7c4c5404aaa1f6d2a48adfda4", "the machine id itself is not reported");
  assert.notEqual(hashMachineId("3d1219c7c4c5404aaa1f6d2a48adfda5"), id);
  assert.equal(existsSync(dataDir), false);
});

test("without a machine id, a random id is written once to the data dir (0600) and read back", (t) => {
  const dir = tempDir(t);
  const dataDir = join(dir, "data");
  const none = [join(dir, "missing"), join(dir, "missing-dir", "machine-id")];
  const id = readHostId(dataDir, none);
  assert.match(id, /^[0-9a-f]{32}$/);
  const file = join(dataDir, HOST_ID_FILE);
  assert.equal(readFileSync(file, "utf8"), `${id}\n`);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.equal(readHostId(dataDir, none), id, "the same id on the next start");

  // Another data dir on a host without a machine id is another id.
  assert.notEqual(readHostId(join(dir, "other"), none), id);

  // An empty id file is replaced.
  writeFileSync(file, "");
  const replaced = readHostId(dataDir, none);
  assert.match(replaced, /^[0-9a-f]{32}$/);
  assert.equal(readFileSync(file, "utf8"), `${replaced}\n`);
});

test("by default /etc/machine-id is read when it holds an id", (t) => {
  const dir = tempDir(t);
  let machineId = "";
  try {
    machineId = readFileSync("/etc/machine-id", "utf8").trim();
  } catch {}
  const id = readHostId(join(dir, "data"));
  if (machineId && machineId !== "uninitialized") assert.equal(id, hashMachineId(machineId));
  else assert.equal(readFileSync(join(dir, "data", HOST_ID_FILE), "utf8"), `${id}\n`);
});

test("a data dir that cannot be written names the file", (t) => {
  const dir = tempDir(t);
  const notADir = join(dir, "file");
  writeFileSync(notADir, "x");
  assert.throws(
    () => readHostId(join(notADir, "data"), []),
    (e: unknown) => e instanceof Error && e.message.includes(`cannot write the host id to ${notADir}`),
  );
});
