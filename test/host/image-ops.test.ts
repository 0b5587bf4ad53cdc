// ContainerHost's import and gc (agent/host/image-ops.ts) against a real
// ImageStore on a temp root, with tiny images built here by umoci and skopeo
// (no registry, no runtime). Also the agent's periodic GC timer.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { imageGcSchedule, startImageGc } from "../../agent/containers.ts";
import { gcImages, imageOpsStore, importImage } from "../../agent/host/image-ops.ts";
import { ImageStore } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { waitFor } from "../../shared/net.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { imageFile } from "../helpers/image-layers.ts";

const isInvalid = (pattern: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === "invalid_request" && pattern.test(e.message);

/** A tree of a few files, its tarball, and OCI / docker archives of a one-layer image of it. */
function tinyImages(work: string) {
  const tree = join(work, "tiny");
  mkdirSync(join(tree, "bin"), { recursive: true });
  writeFileSync(join(tree, "bin", "hello"), "#!/bin/sh\necho hello\n", { mode: 0o755 });
  mkdirSync(join(tree, "etc"));
  writeFileSync(join(tree, "etc", "motd"), "tiny image\n");
  const tarball = join(work, "tiny.tar");
  execFileSync("tar", ["-cf", tarball, "-C", tree, "."]);

  // A different tree from the rootfs imports, so the archive's image has its own digest.
  const layout = join(work, "layout");
  const image = `${layout}:v1`;
  execFileSync("umoci", ["init", "--layout", layout]);
  execFileSync("umoci", ["new", "--image", image]);
  const other = join(work, "other");
  mkdirSync(join(other, "data"), { recursive: true });
  writeFileSync(join(other, "data", "greeting"), "from an archive\n");
  execFileSync("umoci", ["insert", "--image", image, other, "/"]);
  const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as {
    manifests: { digest: string }[];
  };
  const ociArchive = join(work, "tiny.oci.tar");
  execFileSync("skopeo", ["copy", "--quiet", `oci:${image}`, `oci-archive:${ociArchive}`]);
  const dockerArchive = join(work, "tiny.docker.tar");
  execFileSync("skopeo", [
    "copy",
    "--quiet",
    `oci:${image}`,
    `docker-archive:${dockerArchive}:tiny/docker:1`,
  ]);
  return { tree, tarball, ociArchive, dockerArchive, ociDigest: index.manifests[0]!.digest };
}

test("image import and gc through the host's image ops", { timeout: 5 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: ["skopeo", "umoci", "tar"] })) return;
  const work = tempDir(t, "berth-image-ops-src-");
  const root = tempDir(t, "berth-image-ops-store-");
  const files = tinyImages(work);
  const store = imageOpsStore(new ImageStore({ root }));
  const real = store as unknown as ImageStore;

  await t.test("auto imports a directory and a plain tarball as rootfs images", async () => {
    const fromDir = await importImage(store, { path: files.tree, name: "tiny:dir" });
    assert.equal(fromDir.ref, "docker.io/library/tiny:dir");
    assert.equal(fromDir.source, "import");
    assert.equal(readFileSync(imageFile(fromDir, join("etc", "motd")), "utf8"), "tiny image\n");
    const fromTar = await importImage(store, { path: files.tarball, name: "tiny:tar", kind: "auto" });
    assert.ok(existsSync(imageFile(fromTar, join("bin", "hello"))));
    const explicit = await importImage(store, { path: files.tarball, name: "tiny:rootfs", kind: "rootfs" });
    assert.ok(existsSync(imageFile(explicit, join("bin", "hello"))));
  });

  await t.test("auto imports an OCI archive as the image it holds, and a docker archive", async () => {
    const oci = await importImage(store, { path: files.ociArchive, name: "tiny:oci" });
    assert.equal(oci.digest, files.ociDigest, "the archive's own manifest, not a rebuilt rootfs image");
    assert.equal(readFileSync(imageFile(oci, join("data", "greeting")), "utf8"), "from an archive\n");
    const docker = await importImage(store, {
      path: files.dockerArchive,
      name: "tiny:docker",
      kind: "docker-archive",
    });
    assert.ok(existsSync(imageFile(docker, join("data", "greeting"))));
    const refs = real.list().flatMap((i) => i.refs);
    for (const r of ["tiny:dir", "tiny:tar", "tiny:oci", "tiny:docker"]) {
      assert.ok(refs.includes(`docker.io/library/${r}`), r);
    }
  });

  await t.test("bad requests are refused with the path named, and nothing is imported", async () => {
    const before = real.list().length;
    await assert.rejects(
      importImage(store, { path: "images/tiny.tar", name: "x" }),
      isInvalid(/import path images\/tiny\.tar is relative/),
    );
    const missing = join(work, "nope.tar");
    await assert.rejects(
      importImage(store, { path: missing, name: "x" }),
      isInvalid(new RegExp(`import path ${missing} does not exist`)),
    );
    await assert.rejects(
      importImage(store, { path: files.ociArchive, name: "x", kind: "docker-archive" }),
      isInvalid(new RegExp(`${files.ociArchive} is a oci-archive, not a docker-archive`)),
    );
    await assert.rejects(
      importImage(store, { path: files.tarball, name: "x", kind: "oci-archive" }),
      isInvalid(/is a plain tarball \(a rootfs\), not a oci-archive/),
    );
    await assert.rejects(
      importImage(store, { path: files.tree, name: "x", kind: "oci-archive" }),
      isInvalid(/is a directory, not an oci-archive file/),
    );
    const junk = join(work, "junk.bin");
    writeFileSync(junk, "not a tar at all");
    await assert.rejects(
      importImage(store, { path: junk, name: "x" }),
      isInvalid(/neither a directory nor a readable tar/),
    );
    await assert.rejects(importImage(store, { path: files.tarball, name: " " }), isInvalid(/needs a name/));
    assert.equal(real.list().length, before);
  });

  await t.test("gc without an age keeps every image; with 0 removes all but the ones in use", async () => {
    const all = real.list();
    assert.deepEqual((await gcImages(store)).removedImages, []);
    assert.equal(real.list().length, all.length);

    const used = all.find((i) => i.refs.includes("docker.io/library/tiny:oci"))!;
    real.markInUse(used.digest, "ctr-uses-oci");
    const r = await gcImages(store, { unusedForMs: 0 });
    const expected = [...new Set(all.map((i) => i.digest))].filter((d) => d !== used.digest);
    assert.deepEqual([...r.removedImages].sort(), expected.sort());
    assert.ok(r.freedBytes > 0);
    assert.deepEqual(
      real.list().map((i) => i.digest),
      [used.digest],
    );
    assert.ok(existsSync(imageFile(used, join("data", "greeting"))), "the in-use image's rootfs is untouched");

    await assert.rejects(gcImages(store, { unusedForMs: -5 }), isInvalid(/non-negative/));
    real.release(used.digest, "ctr-uses-oci");
    assert.deepEqual((await gcImages(store, { unusedForMs: 0 })).removedImages, [used.digest]);
    assert.deepEqual(real.list(), []);
  });

  await t.test("the periodic GC removes unused images on its own and stops on close", async () => {
    const img = await importImage(store, { path: files.tree, name: "tiny:periodic" });
    const logged: { obj: object; msg?: string }[] = [];
    const log = { info: (obj: object, msg?: string) => logged.push({ obj, msg }), warn: () => {} };
    const gc = startImageGc(real, { intervalMs: 50, unusedForMs: 0 }, log);
    try {
      await waitFor(() => real.list().length === 0, { what: "the periodic gc", timeoutMs: 60_000 });
    } finally {
      await gc.stop();
    }
    await waitFor(() => logged.length > 0, { what: "the gc log line", timeoutMs: 10_000 });
    assert.deepEqual((logged[0]!.obj as { removedImages: string[] }).removedImages, [img.digest]);
  });
});

test("the host's image ops refuse a store that cannot import, and the GC schedule has defaults", () => {
  assert.throws(
    () => imageOpsStore({ list: () => [] }),
    (e: unknown) => e instanceof BerthError && e.code === "not_implemented",
  );
  assert.deepEqual(imageGcSchedule({}), { intervalMs: 3_600_000, unusedForMs: 86_400_000 });
  assert.deepEqual(imageGcSchedule({ imageGcIntervalMs: 0, imageGcUnusedForMs: 5 }), {
    intervalMs: 0,
    unusedForMs: 5,
  });
  assert.throws(() => imageGcSchedule({ imageGcIntervalMs: -1 }), /intervalMs must be 0 or more/);
});
