import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ImageStore } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage, TEST_IMAGE_TAG, testImageDigest, testImageLayout } from "../helpers/test-image.ts";
import { RecordingRunner, skopeoInspects } from "./runner-hooks.ts";
import { imageFile } from "../helpers/image-layers.ts";

const blobCount = (root: string) => readdirSync(join(root, "oci", "blobs", "sha256")).length;

test("import for air-gapped hosts", { timeout: 10 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: ["skopeo", "umoci", "tar"] })) return;
  const layout = await testImageLayout();
  const work = tempDir(t, "berth-archives-");
  const root = tempDir(t, "berth-images-");
  const runner = new RecordingRunner();
  const store = new ImageStore({ root, runner });

  await t.test("an OCI archive imports as the same image, usable by name without a registry", async () => {
    const archive = join(work, "python.oci.tar");
    execFileSync("skopeo", ["copy", "--quiet", `oci:${layout}:${TEST_IMAGE_TAG}`, `oci-archive:${archive}`]);
    const info = await store.importArchive(archive, { name: "python:offline" });
    assert.equal(info.digest, await testImageDigest());
    assert.equal(info.ref, "docker.io/library/python:offline");
    assert.equal(info.source, "import");
    assert.ok(existsSync(imageFile(info, "usr/bin/python3")));
    const pulled = await store.pull("python:offline");
    assert.equal(pulled.digest, info.digest);
    assert.equal(skopeoInspects(runner), 0, "an imported name never asks a registry");
  });

  await t.test("a docker save archive is detected and imported", async () => {
    const archive = join(work, "python.docker.tar");
    execFileSync("skopeo", [
      "copy",
      "--quiet",
      `oci:${layout}:${TEST_IMAGE_TAG}`,
      `docker-archive:${archive}:berth/python:bookworm`,
    ]);
    const info = await store.importArchive(archive, { name: "berth.local/python:docker" });
    assert.ok(existsSync(imageFile(info, "usr/bin/python3")));
    assert.deepEqual(info.config.cmd, ["python3"]);
    assert.ok(store.list().some((i) => i.refs.includes("berth.local/python:docker")));
  });

  await t.test("a plain rootfs tarball becomes an image; importArchive refuses it with a hint", async () => {
    const src = join(work, "tiny");
    mkdirSync(join(src, "bin"), { recursive: true });
    writeFileSync(join(src, "bin", "hello"), "#!/bin/sh\necho hello\n", { mode: 0o755 });
    mkdirSync(join(src, "etc"));
    writeFileSync(join(src, "etc", "motd"), "tiny image\n");
    const tarball = join(work, "tiny.tar");
    execFileSync("tar", ["-cf", tarball, "-C", src, "."]);
    await assert.rejects(
      store.importArchive(tarball, { name: "tiny" }),
      (e: unknown) =>
        e instanceof BerthError &&
        e.code === "invalid_request" &&
        e.message.includes(tarball) &&
        /importRootfs/.test(e.message),
    );
    const info = await store.importRootfs(tarball, { name: "tiny:1" });
    assert.equal(readFileSync(imageFile(info, join("etc", "motd")), "utf8"), "tiny image\n");
    assert.ok(info.config.env.some((e) => e.startsWith("PATH=")));
    const fromDir = await store.importRootfs(src, { name: "tiny:dir" });
    assert.ok(existsSync(imageFile(fromDir, join("bin", "hello"))));
    assert.deepEqual(readdirSync(join(root, "tmp")), []);
  });

  await t.test("missing or non-tar inputs are refused, naming the path", async () => {
    await assert.rejects(store.importArchive(join(work, "nope.tar"), { name: "x" }), /nope\.tar/);
    const junk = join(work, "junk.tar");
    writeFileSync(junk, "not a tar at all");
    await assert.rejects(
      store.importArchive(junk, { name: "x" }),
      (e: unknown) => e instanceof BerthError && e.message.includes(junk),
    );
    await assert.rejects(
      store.importRootfs(junk, { name: "x" }),
      (e: unknown) => e instanceof BerthError && e.message.includes(junk),
    );
    assert.deepEqual(readdirSync(join(root, "tmp")), []);
  });
});

test("remove, in-use protection and gc", { timeout: 10 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: ["skopeo", "umoci", "docker-registry"] })) return;
  const registry = await startTestRegistry(t);
  const ref = await pushTestImage(registry.host);
  const root = tempDir(t, "berth-images-");
  const store = new ImageStore({ root });
  const info = await store.pull(ref);
  assert.ok(blobCount(root) >= 3);

  await t.test("an image in use cannot be removed", async () => {
    store.markInUse(info.digest, "ctr-1");
    assert.deepEqual(store.get(ref)?.inUseBy, ["ctr-1"]);
    await assert.rejects(
      store.remove(ref),
      (e: unknown) => e instanceof BerthError && e.code === "conflict" && /ctr-1/.test(e.message),
    );
    const gc = await store.gc({ unusedForMs: 0 });
    assert.deepEqual(gc.removedImages, []);
    assert.ok(info.layers.every((l) => existsSync(l)));
    assert.throws(
      () => store.markInUse(`sha256:${"0".repeat(64)}`, "ctr-2"),
      (e: unknown) => e instanceof BerthError && e.code === "not_found",
    );
  });

  await t.test("remove takes the image's layers; gc frees the blobs", async () => {
    store.release(info.digest, "ctr-1");
    const removed = await store.remove(ref);
    assert.deepEqual(removed.removed, [info.digest]);
    assert.ok(
      info.layers.every((l) => !existsSync(l)),
      "no other image has its layers",
    );
    assert.deepEqual(readdirSync(join(root, "layers")), []);
    assert.deepEqual(readdirSync(join(root, "l")), [], "no link is left dangling");
    assert.equal(store.get(ref), undefined);
    assert.ok(blobCount(root) >= 3, "blobs stay until gc");
    const gc = await store.gc();
    assert.ok(gc.removedBlobs >= 3, JSON.stringify(gc));
    assert.ok(gc.freedBytes > 10 * 1024 * 1024, JSON.stringify(gc));
    assert.equal(blobCount(root), 0);
    await assert.rejects(
      store.remove(ref),
      (e: unknown) => e instanceof BerthError && e.code === "not_found",
    );
  });

  await t.test("gc by age keeps what is kept, removes the rest, and orphaned dirs", async () => {
    const again = await store.pull(ref);
    const orphan = join(root, "rootfs", "f".repeat(64));
    mkdirSync(join(orphan, "etc"), { recursive: true });
    writeFileSync(join(orphan, "etc", "x"), "stray");
    const kept = await store.gc({ unusedForMs: 0, keep: [ref] });
    assert.deepEqual(kept.removedImages, []);
    assert.deepEqual(kept.removedRootfsDirs, [orphan]);
    assert.ok(again.layers.every((l) => existsSync(l)));
    const swept = await store.gc({ unusedForMs: 0 });
    assert.deepEqual(swept.removedImages, [again.digest]);
    assert.equal(swept.removedLayers.length, again.layers.length);
    assert.ok(swept.freedBytes >= again.sizeBytes, JSON.stringify(swept));
    assert.ok(again.layers.every((l) => !existsSync(l)));
    assert.equal(blobCount(root), 0);
    assert.deepEqual(store.list(), []);
  });
});
