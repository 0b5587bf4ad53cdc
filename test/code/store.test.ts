// The agent's code store against real archives and the real `tar`.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { CodeStore } from "../../agent/code/store.ts";
import { tempDir } from "../helpers/env.ts";
import { chunks, sha256Hex, type TarEntry, tarGz } from "./tar-builder.ts";

const rejectsWith = (code: string, re: RegExp) => (e: unknown) => {
  const err = e as { code?: string; message?: string };
  assert.equal(err.code, code, err.message);
  assert.match(err.message ?? "", re);
  return true;
};

const GOOD: TarEntry[] = [
  { name: "./", type: "5" },
  { name: "app.py", data: "def square(x):\n    return x * x\n", mode: 0o600 },
  { name: "pkg/", type: "5", mode: 0o700 },
  { name: "pkg/util.py", data: "X = 1\n" },
];

/** Nothing but finished trees: no temp file or directory left. */
const entriesOf = (root: string) => readdirSync(root).sort();

test("put unpacks a checked archive under its hash, readable by everyone", async (t) => {
  const root = join(tempDir(t, "berth-code-"), "code");
  const store = new CodeStore(root);
  const archive = tarGz(GOOD);
  const sha = sha256Hex(archive);
  assert.equal(store.has(sha), false);
  await store.put(sha, chunks(archive, 100));
  assert.equal(store.has(sha), true);
  assert.equal(store.has(sha.toUpperCase()), true, "hex case does not matter");
  const dir = store.dir(sha);
  assert.equal(readFileSync(join(dir, "app.py"), "utf8"), "def square(x):\n    return x * x\n");
  assert.equal(readFileSync(join(dir, "pkg", "util.py"), "utf8"), "X = 1\n");
  assert.equal(statSync(join(dir, "app.py")).mode & 0o777, 0o644, "a 0600 file becomes world-readable");
  assert.equal(statSync(join(dir, "pkg")).mode & 0o777, 0o755, "a 0700 dir becomes world-traversable");
  assert.deepEqual(entriesOf(root), [sha]);
  // The tree lies at mnt/code of its overlay layer, the container's working directory.
  assert.equal(store.layer(sha), join(root, sha));
  assert.equal(dir, join(root, sha, "mnt", "code"));
  assert.deepEqual(entriesOf(store.layer(sha)), ["mnt"]);
  // Putting it again is a no-op that need not read the data.
  await store.put(sha, chunks(Buffer.from("not even an archive")));
  assert.deepEqual(entriesOf(root), [sha]);
});

test("a hash mismatch names both hashes and leaves nothing", async (t) => {
  const root = tempDir(t, "berth-code-");
  const store = new CodeStore(root);
  const archive = tarGz(GOOD);
  const claimed = "a".repeat(64);
  await assert.rejects(
    store.put(claimed, chunks(archive)),
    rejectsWith("invalid_request", new RegExp(`expected sha256 ${claimed}.*hashes to ${sha256Hex(archive)}`)),
  );
  assert.deepEqual(entriesOf(root), []);
  assert.equal(store.has(claimed), false);
});

test("unsafe entries are refused by name and leave nothing", async (t) => {
  const root = tempDir(t, "berth-code-");
  const store = new CodeStore(root);
  const cases: [string, TarEntry[], RegExp][] = [
    ["symlink", [{ name: "link", type: "2", linkname: "/etc/passwd" }], /"link" is a symbolic link/],
    [
      "hard link",
      [
        { name: "a", data: "x" },
        { name: "b", type: "1", linkname: "a" },
      ],
      /"b" is a hard link/,
    ],
    ["device", [{ name: "dev", type: "3" }], /"dev" is a character device/],
    ["dot-dot", [{ name: "../evil.py", data: "x" }], /"\.\.\/evil\.py" is unsafe: a '\.\.' component/],
    ["nested dot-dot", [{ name: "a/../../b", data: "x" }], /"a\/\.\.\/\.\.\/b" is unsafe/],
    ["absolute", [{ name: "/etc/cron.d/x", data: "x" }], /"\/etc\/cron\.d\/x" is unsafe: an absolute path/],
    [
      "pax path override",
      [{ name: "fine.py", data: "x", paxPath: "../../escape.py" }],
      /"\.\.\/\.\.\/escape\.py" is unsafe/,
    ],
  ];
  for (const [what, entries, re] of cases) {
    const archive = tarGz([{ name: "ok.py", data: "print(1)\n" }, ...entries]);
    await assert.rejects(
      store.put(sha256Hex(archive), chunks(archive)),
      rejectsWith("invalid_request", re),
      what,
    );
    assert.deepEqual(entriesOf(root), [], `${what}: nothing left`);
  }
  const notGzip = Buffer.from("plain text, not a tar.gz");
  await assert.rejects(
    store.put(sha256Hex(notGzip), chunks(notGzip)),
    rejectsWith("invalid_request", /not a valid tar\.gz/),
  );
  assert.deepEqual(entriesOf(root), []);
});

test("an archive over the size limit is refused while it streams", async (t) => {
  const root = tempDir(t, "berth-code-");
  const store = new CodeStore(root, { maxArchiveBytes: 64 * 1024 });
  const big = tarGz([{ name: "blob.bin", data: randomBytes(200_000) }]);
  assert.ok(big.length > 64 * 1024, "the test archive must be over the limit");
  let read = 0;
  async function* counted() {
    for await (const c of chunks(big, 16 * 1024)) {
      read += c.byteLength;
      yield c;
    }
  }
  await assert.rejects(
    store.put(sha256Hex(big), counted()),
    rejectsWith("resource_exhausted", /over the limit of 65536 bytes/),
  );
  assert.ok(read <= 64 * 1024 + 16 * 1024, "stopped reading at the limit");
  assert.deepEqual(entriesOf(root), []);
  await assert.rejects(store.put("xyz", chunks(big)), rejectsWith("invalid_request", /64 hex digits/));
  assert.throws(() => store.has("../../etc"), rejectsWith("invalid_request", /64 hex digits/));
});

test("concurrent puts of one hash unpack it once; a failed first put lets the next one try", async (t) => {
  const root = tempDir(t, "berth-code-");
  const store = new CodeStore(root);
  const archive = tarGz(GOOD);
  const sha = sha256Hex(archive);
  let streamsRead = 0;
  async function* tracked(data: Buffer) {
    streamsRead++;
    yield* chunks(data, 256, 2);
  }
  await Promise.all(Array.from({ length: 5 }, () => store.put(sha, tracked(archive))));
  assert.equal(streamsRead, 1, "the later puts waited for the first instead of reading their own data");
  assert.deepEqual(entriesOf(root), [sha]);

  const other = tarGz([{ name: "v2.py", data: "print(2)\n" }]);
  const otherSha = sha256Hex(other);
  const results = await Promise.allSettled([
    store.put(otherSha, chunks(Buffer.from("garbage that does not hash right"))),
    store.put(otherSha, chunks(other)),
  ]);
  assert.equal(results[0].status, "rejected");
  assert.equal(results[1].status, "fulfilled", "the second put used its own, good data");
  assert.equal(readFileSync(join(store.dir(otherSha), "v2.py"), "utf8"), "print(2)\n");
  assert.deepEqual(entriesOf(root), [sha, otherSha].sort());
});

test("a tree an older agent unpacked at <sha>/ itself is set aside, not deleted, and the layer takes its place", async (t) => {
  const root = tempDir(t, "berth-code-");
  const archive = tarGz(GOOD);
  const sha = sha256Hex(archive);
  mkdirSync(join(root, sha));
  writeFileSync(join(root, sha, "app.py"), "old\n");
  const store = new CodeStore(root);
  assert.equal(store.has(sha), false, "the old layout has no mnt/code");
  await store.put(sha, chunks(archive));
  assert.equal(readFileSync(join(store.dir(sha), "app.py"), "utf8"), "def square(x):\n    return x * x\n");
  const aside = entriesOf(root).filter((n) => n !== sha);
  assert.equal(aside.length, 1, String(aside));
  assert.match(aside[0] ?? "", /^\.pre-layer-/);
  assert.equal(
    readFileSync(join(root, aside[0] ?? "", "app.py"), "utf8"),
    "old\n",
    "a container may still mount it",
  );
});
