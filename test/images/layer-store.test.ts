// The layer store (docs/images.md, "Where the cache lives"): images on one
// base share its unpacked layers, a layer goes when no image names it, an
// older agent's whole-image rootfs keeps serving until its image goes, and a
// deep image still mounts (mount options past a page are named relative to
// the short links dir, as containerd's overlay snapshotter does).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ImageStore } from "../../agent/images/index.ts";
import { unescapeTarName, whiteoutsOf } from "../../agent/images/layer-unpack.ts";
import {
  mountOverlay,
  type OverlayPaths,
  overlayMountOptions,
  overlayPathsFor,
  unmountOverlay,
} from "../../agent/runtime/rootfs.ts";
import { BerthError } from "../../shared/errors.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { imageFile, mountImage } from "../helpers/image-layers.ts";

/** An uncompressed layer tarball holding `files` (path → content). */
function layerTar(work: string, name: string, files: Record<string, string>): string {
  const dir = join(work, `src-${name}`);
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  const tar = join(work, `${name}.tar`);
  execFileSync("tar", ["--create", "--file", tar, "--numeric-owner", "-C", dir, "."]);
  return tar;
}

test("tar's escaped listing decodes to the raw names, whiteouts picked out", () => {
  assert.deepEqual(unescapeTarName("a b\\nc\\\\d\\303\\251"), Buffer.from("a b\nc\\d\u00e9"));
  const listing = [
    "./",
    "./etc/",
    "./etc/.wh.motd",
    "./var/x/.wh..wh..opq",
    "./a.wh.b",
    "./sp ace/.wh.f\\tg",
    "",
  ];
  assert.deepEqual(
    whiteoutsOf(listing.join("\n")).map((b) => b.toString("latin1")),
    ["etc/.wh.motd", "var/x/.wh..wh..opq", "sp ace/.wh.f\tg"],
  );
});

test("images on one base share its layers; a layer goes when no image names it", {
  timeout: 5 * 60_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: ["umoci", "skopeo", "tar", "python3"] })) return;
  const work = tempDir(t, "berth-layer-store-");
  const root = join(work, "store");
  const store = new ImageStore({ root });
  const baseDir = join(work, "base");
  mkdirSync(join(baseDir, "etc"), { recursive: true });
  writeFileSync(join(baseDir, "etc", "motd"), "base\n");
  writeFileSync(join(baseDir, "big.bin"), Buffer.alloc(2 * 1024 * 1024, 1));
  const base = await store.importRootfs(baseDir, { name: "berth.local/base:1" });
  const a = await store.commitLayer(base.ref, layerTar(work, "a", { "app/a": "a\n" }), {
    name: "berth.local/a:1",
  });
  const b = await store.commitLayer(base.ref, layerTar(work, "b", { "app/b": "b\n" }), {
    name: "berth.local/b:1",
  });
  const layerDirs = () => readdirSync(join(root, "layers")).sort();

  await t.test("the base is unpacked once, however many images stand on it", () => {
    assert.equal(a.layers[1], base.layers[0]);
    assert.equal(b.layers[1], base.layers[0]);
    assert.equal(layerDirs().length, 3, "base, a and b: one dir each");
    assert.equal(readFileSync(imageFile(a, "etc/motd"), "utf8"), "base\n");
    assert.ok(!existsSync(imageFile(a, "app/b")));
    assert.ok(a.sizeBytes >= base.sizeBytes + 2);
  });

  await t.test("removing an image keeps the layers others use and takes its own", async () => {
    await store.remove(base.ref);
    assert.equal(layerDirs().length, 3, "a and b still stand on the base layer");
    assert.equal(readFileSync(join(mountImage(t, b), "etc/motd"), "utf8"), "base\n");
    store.markInUse(a.digest, "ctr-a");
    const gc = await store.gc({ unusedForMs: 0 });
    assert.deepEqual(gc.removedImages, [b.digest]);
    assert.equal(gc.removedLayers.length, 1, "only b's own layer");
    assert.ok(!existsSync(b.layers[0]!));
    assert.ok(existsSync(a.layers[0]!) && existsSync(a.layers[1]!));
    store.release(a.digest, "ctr-a");
    await store.remove(a.ref);
    assert.deepEqual(layerDirs(), []);
    assert.deepEqual(readdirSync(join(root, "l")), [], "no link is left dangling");
  });
});

test("an older agent's whole-image rootfs keeps serving until its image goes", {
  timeout: 5 * 60_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: ["umoci", "skopeo", "tar", "python3"] })) return;
  const work = tempDir(t, "berth-layer-legacy-");
  const root = join(work, "store");
  const src = join(work, "src");
  mkdirSync(join(src, "etc"), { recursive: true });
  writeFileSync(join(src, "etc", "motd"), "old\n");
  const first = await new ImageStore({ root }).importRootfs(src, { name: "berth.local/old:1" });
  // What an older agent left: the record without layers, the image unpacked whole.
  const hex = first.digest.slice("sha256:".length);
  const legacy = join(root, "rootfs", hex);
  mkdirSync(join(legacy, "etc"), { recursive: true });
  writeFileSync(join(legacy, "etc", "motd"), "old\n");
  const index = JSON.parse(readFileSync(join(root, "index.json"), "utf8")) as {
    images: Record<string, { layers?: string[] }>;
  };
  for (const r of Object.values(index.images)) delete r.layers;
  writeFileSync(join(root, "index.json"), JSON.stringify(index));
  execFileSync("rm", ["-rf", join(root, "layers"), join(root, "l")]);

  const store = new ImageStore({ root });
  const info = store.get("berth.local/old:1");
  assert.deepEqual(info?.layers, [legacy], "the whole rootfs is its one lower dir");
  assert.equal(readFileSync(join(mountImage(t, info!), "etc/motd"), "utf8"), "old\n");
  store.markInUse(first.digest, "ctr-old");
  const kept = await store.gc({ unusedForMs: 0 });
  assert.deepEqual(kept.removedImages, []);
  assert.ok(existsSync(legacy), "a container still runs from it");
  store.release(first.digest, "ctr-old");
  const swept = await store.gc({ unusedForMs: 0 });
  assert.deepEqual(swept.removedImages, [first.digest]);
  assert.deepEqual(swept.removedRootfsDirs, [legacy]);
  assert.ok(!existsSync(legacy));
  const again = await store.importRootfs(src, { name: "berth.local/old:1" });
  assert.ok(again.layers[0]?.startsWith(join(root, "l")), "imported again, it is laid out by layer");
  await assert.rejects(store.remove(`sha256:${"0".repeat(64)}`), (e: unknown) => e instanceof BerthError);
});

test("a deep image mounts: lower dirs past a page are named relative to their dir", {
  timeout: 60_000,
}, async (t) => {
  if (!needs(t, { root: true })) return;
  const work = mkdtempSync(join(tmpdir(), "berth-deep-overlay-"));
  let paths: OverlayPaths | undefined;
  // One hook, in order: the overlay goes before the dirs under it.
  t.after(async () => {
    if (paths) await unmountOverlay(paths.merged);
    rmSync(work, { recursive: true, force: true });
  });
  const links = join(work, "a-long-directory-name-that-makes-every-path-long".repeat(2), "l");
  mkdirSync(links, { recursive: true });
  const lowers: string[] = [];
  for (let i = 0; i < 160; i++) {
    const d = join(links, `layer${String(i).padStart(8, "0")}`);
    mkdirSync(d);
    writeFileSync(join(d, `f${i}`), `${i}\n`);
    lowers.push(d);
  }
  paths = overlayPathsFor(join(work, "bundle"), lowers);
  const { options, cwd } = overlayMountOptions(paths);
  assert.equal(cwd, links);
  assert.ok(options.length < 4096, `${options.length} bytes`);
  assert.ok(lowers.join(":").length > 4096, "the absolute form would not fit");
  await mountOverlay(paths);
  assert.equal(readFileSync(join(paths.merged, "f0"), "utf8"), "0\n");
  assert.equal(readFileSync(join(paths.merged, "f159"), "utf8"), "159\n");
  assert.deepEqual(overlayMountOptions(overlayPathsFor(work, lowers.slice(0, 3))).cwd, undefined);
});
